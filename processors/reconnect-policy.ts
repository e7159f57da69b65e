/**
 * The one reconnect policy of the processors that hold a provider connection (the speech-to-text
 * base, the speech-to-speech processor): exponential backoff capped at `maxMs`; an attempt budget
 * that only a connection which held (stayed open `stableConnectionMs`) refills, so a provider
 * that accepts and drops at once, again and again, is given up on like one that refuses; and an
 * end at once on a failure no retry can fix (a `ProviderError` that is not `retryable`: a refused
 * key or configuration).
 */
import { isAbortError, type Clock } from '../core/clock.ts';
import { ProviderError } from '../core/provider-error.ts';

export interface ReconnectSettings {
  /** First delay; doubles on each failed attempt. */
  readonly baseMs: number;
  /** Longest wait between attempts. */
  readonly maxMs: number;
  /** Attempts before giving up, since the last connection that held. */
  readonly attempts: number;
  /** A connection open this long (ms) was a working one: the budget is refilled when it drops. */
  readonly stableConnectionMs: number;
}

export type ReconnectOutcome =
  | { readonly kind: 'reconnected' }
  /** A failure no retry can fix (the drop's cause or an attempt's). */
  | { readonly kind: 'permanent'; readonly error: unknown }
  /** The budget is spent; `last` is the last attempt's failure, if one was made. */
  | { readonly kind: 'exhausted'; readonly last: unknown }
  /** The owner closed meanwhile (or aborted the wait). */
  | { readonly kind: 'stopped' };

/** A provider refusal that trying again cannot fix. */
export function isPermanentFailure(err: unknown): boolean {
  return err instanceof ProviderError && !err.retryable;
}

export class ReconnectPolicy {
  /** Attempts spent since the last connection that held. */
  private spent = 0;
  private openedAt = Number.NEGATIVE_INFINITY;

  /** `clock`: the owner's clock when asked (a processor's comes with its start frame). */
  constructor(
    readonly settings: ReconnectSettings,
    private readonly clock: () => Pick<Clock, 'now' | 'sleep'>,
  ) {}

  /** The owner's connection opened now (the first one and every reconnection). */
  opened(): void {
    this.openedAt = this.clock().now();
  }

  /**
   * After a drop caused by `cause`: waits, then calls `connect` (which calls `opened()` on
   * success), until it succeeds, a failure is permanent, the budget is spent or `stopped()`.
   */
  async reconnect(cause: unknown, connect: () => Promise<void>, options: { readonly stopped: () => boolean; readonly signal?: AbortSignal }): Promise<ReconnectOutcome> {
    if (isPermanentFailure(cause)) return { kind: 'permanent', error: cause };
    if (this.clock().now() - this.openedAt >= this.settings.stableConnectionMs) this.spent = 0;
    let last: unknown;
    while (this.spent < this.settings.attempts) {
      // The backoff goes on across connections that did not hold.
      const delay = Math.min(this.settings.baseMs * 2 ** this.spent, this.settings.maxMs);
      this.spent++;
      try {
        await this.clock().sleep(delay, options.signal);
        if (options.stopped()) return { kind: 'stopped' };
        await connect();
        return { kind: 'reconnected' };
      } catch (err) {
        if (isAbortError(err) || options.stopped()) return { kind: 'stopped' };
        if (isPermanentFailure(err)) return { kind: 'permanent', error: err };
        last = err;
      }
    }
    return { kind: 'exhausted', last };
  }
}
