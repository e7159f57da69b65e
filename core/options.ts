/**
 * One way to merge a caller's options over declared defaults, so every setting has exactly one
 * default (in its `*_DEFAULTS` object) and no component repeats `options.x ?? DEFAULTS.x` field
 * by field, or hides a literal fallback in its code.
 *
 * Only `undefined` falls back to the default: `null`, `0`, `false` and `''` are values a caller
 * chose (e.g. `idleTimeoutMs: null` disables the idle timeout).
 */

type UnionToIntersection<U> = (U extends unknown ? (x: U) => void : never) extends (x: infer I) => void ? I : never;
type IsUnion<T> = [T] extends [UnionToIntersection<T>] ? false : true;

/**
 * The type of a declared default as a setting: `200` (from `as const`) is a `number`, `'en'` a
 * `string`, `true` a `boolean`. A declared union (`300 as number | false`, `'auto' as 'auto' |
 * 'max_tokens'`) is kept as it is.
 */
export type Setting<T> = IsUnion<T> extends true ? T : T extends number ? number : T extends string ? string : T extends boolean ? boolean : T;

/** Every key of `D`, each widened from its `as const` literal to its setting type. */
export type Resolved<D> = { -readonly [K in keyof D]: Setting<D[K]> };

/** What a caller may pass for `D`: any subset, `undefined` meaning "the default". */
export type OptionsFor<D> = { readonly [K in keyof D]?: Setting<D[K]> | undefined };

/**
 * `defaults` with each key the caller set (not `undefined`) replaced by the caller's value. Keys
 * of `options` that `defaults` does not declare (a processor's `name`, ...) are not copied: the
 * result holds settings only.
 */
export function resolveOptions<D extends object>(defaults: D, options: OptionsFor<D> | undefined = undefined): Resolved<D> {
  const out = { ...defaults } as Record<string, unknown>;
  if (options) {
    for (const key of Object.keys(defaults)) {
      const value = (options as Record<string, unknown>)[key];
      if (value !== undefined) out[key] = value;
    }
  }
  return out as Resolved<D>;
}
