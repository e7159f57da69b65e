/** A bench's settings from the environment, each refused with an error that names it when malformed. */

/** One of `values` (the first is the default, when unset or empty), or an error naming the setting. */
export function choice<T extends string>(name: string, values: readonly [T, ...T[]]): T {
  const value = process.env[name] || values[0];
  if (!(values as readonly string[]).includes(value)) throw new Error(`${name} must be one of ${values.join(', ')}, got ${value}`);
  return value as T;
}

/** `on` or `off` as true or false; undefined when unset or empty (the default is the caller's). */
export function onOff(name: string): boolean | undefined {
  const value = process.env[name];
  if (value === undefined || value === '') return undefined;
  if (value !== 'on' && value !== 'off') throw new Error(`${name} must be on or off, got ${value}`);
  return value === 'on';
}
