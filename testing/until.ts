/**
 * Waiting in real time for something another process, socket or browser will make true. Tests
 * of the pipeline itself use the virtual clock (`clock.advanceUntil`) and never wait like this.
 */
import { resolveOptions } from '../core/options.ts';

export const UNTIL_DEFAULTS = {
  /** Upper bound of a wait: generous, since a loaded test machine is slow, not broken. */
  timeoutMs: 10_000,
  /** Pause between two checks. */
  intervalMs: 10,
} as const;

export interface UntilOptions {
  readonly timeoutMs?: number;
  readonly intervalMs?: number;
  /**
   * What is awaited, for the error message; a function is called when the wait times out, so the
   * message can say what was seen by then (the events so far, the last value read).
   */
  readonly what?: string | (() => string);
}

export class UntilTimeoutError extends Error {
  readonly code = 'until_timeout';
  constructor(what: string, timeoutMs: number) {
    super(`timed out after ${timeoutMs} ms waiting for ${what}`);
    this.name = 'UntilTimeoutError';
  }
}

/**
 * Resolves with the first truthy value `check` returns (sync or async), checking every
 * `intervalMs`; rejects with an `UntilTimeoutError` naming `what` after `timeoutMs`.
 */
export async function until<T>(check: () => T | undefined | null | false | Promise<T | undefined | null | false>, options: UntilOptions = {}): Promise<T> {
  const { timeoutMs, intervalMs } = resolveOptions(UNTIL_DEFAULTS, options);
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (performance.now() >= deadline) throw new UntilTimeoutError(describe(options.what), timeoutMs);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

function describe(what: UntilOptions['what']): string {
  return (typeof what === 'function' ? what() : what) ?? 'a condition';
}

/**
 * Like `until` (same options), but answers whether the condition held in time instead of
 * throwing: for a wait whose outcome the test branches on or asserts false.
 */
export async function holdsWithin(check: () => unknown, options: UntilOptions = {}): Promise<boolean> {
  try {
    await until(async () => Boolean(await check()), options);
    return true;
  } catch (err) {
    if (err instanceof UntilTimeoutError) return false;
    throw err;
  }
}

/**
 * Resolves with the first value `check` returns that is not undefined (0, false and '' count, so
 * a metric at 0 is a value); a check that throws (a server still starting) counts as not yet.
 */
export async function eventually<T>(check: () => T | undefined | Promise<T | undefined>, options: UntilOptions = {}): Promise<T> {
  const found = await until(
    async () => {
      try {
        const value = await check();
        return value === undefined ? undefined : { value };
      } catch {
        return undefined;
      }
    },
    options,
  );
  return found.value;
}
