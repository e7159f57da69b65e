/**
 * How a process paces its bots' starts (issue 25): at most `SESSION_START.concurrentStarts` at
 * once, each after the connects being decided now (`PendingDecisions`), so that a burst of
 * admissions is answered before the bots' start-ups take the event loop. Used by LiveSessions
 * (live-sessions.ts).
 */
import { RealClock, type Clock } from '../../core/clock.ts';

export const SESSION_START = {
  /**
   * Bots this process starts at once; further admitted sessions wait their turn. A start (the
   * pipeline, the face session, the room's first negotiation) is the heaviest moment of a
   * session: a burst of admissions started all at once made the live bots' frames late, and the
   * process judged itself overloaded by its own start-ups (issue 25).
   */
  concurrentStarts: 2,
  /**
   * A start waits while connects of this process are still being decided, up to this long: a
   * burst is answered (admitted or refused, a few database round trips each) before the bots'
   * start-ups take the event loop, so the decisions do not queue behind them (issue 25: decision
   * p99 1 s with the starts interleaved). A steady stream of connects cannot hold a start longer.
   */
  maxDecisionsFirstMs: 1_000,
  /**
   * ... and until no connect arrived for this long: a burst's requests reach the process spread
   * over tens of ms (new connections, 2-10 ms apart in the first burst after a start), so the line
   * goes empty between them; a start-up in such a gap delayed the decisions of the connects behind
   * it (bench/_admission-burst.ts). A connect alone pays at most this, minus its own decision time.
   */
  quietAfterArrivalMs: 20,
  /**
   * ... for at most this long (ms, from the start of the wait): under a steady stream of connects
   * (a popular agent at its limit, widgets retrying) a gap of quietAfterArrivalMs may never come,
   * and a start-up then waits no more than this for one.
   */
  quietWaitMaxMs: 150,
} as const;

/**
 * Connects being decided now; `quiet()` resolves once there are none and none arrived for
 * `SESSION_START.quietAfterArrivalMs` (that second condition waited for at most
 * `SESSION_START.quietWaitMaxMs`), or after `maxMs` whatever happens.
 */
export class PendingDecisions {
  /** `clock`: real time by default, its timers unref'd (a start-up's wait never holds a process open by itself). */
  constructor(private readonly clock: Clock = new RealClock({ unref: true })) {}
  private count = 0;
  private lastArrival = Number.NEGATIVE_INFINITY;
  private readonly waiters: (() => void)[] = [];
  begin(): () => void {
    this.count++;
    this.lastArrival = this.clock.now();
    let done = false;
    return () => {
      if (done) return;
      done = true;
      if (--this.count === 0) for (const wake of this.waiters.splice(0)) wake();
    };
  }
  quiet(maxMs: number): Promise<void> {
    const started = this.clock.now();
    const until = started + maxMs;
    const quietUntil = started + Math.min(maxMs, SESSION_START.quietWaitMaxMs);
    const settled = async (): Promise<void> => {
      for (;;) {
        const now = this.clock.now();
        if (now >= until) return;
        if (this.count > 0) {
          await this.wake(until - now);
          continue;
        }
        const sinceArrival = now - this.lastArrival;
        if (sinceArrival >= SESSION_START.quietAfterArrivalMs || now >= quietUntil) return;
        await this.clock.sleep(Math.min(SESSION_START.quietAfterArrivalMs - sinceArrival, quietUntil - now));
      }
    };
    return settled();
  }
  /** Resolves when the count falls to 0, or after `ms`. */
  private wake(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = this.clock.setTimeout(() => {
        const i = this.waiters.indexOf(wake);
        if (i >= 0) this.waiters.splice(i, 1);
        resolve();
      }, ms);
      const wake = () => {
        this.clock.clearTimeout(timer);
        resolve();
      };
      this.waiters.push(wake);
    });
  }
}

/** At most `limit` starts at once, in arrival order, each after the connects being decided (PendingDecisions). */
export class StartPacer {
  private running = 0;
  private readonly waiting: (() => void)[] = [];
  constructor(
    private readonly limit: number,
    private readonly decisions: PendingDecisions,
  ) {}
  async run<T>(start: () => Promise<T>): Promise<T> {
    if (this.running >= this.limit) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.running++;
    await this.decisions.quiet(SESSION_START.maxDecisionsFirstMs);
    try {
      return await start();
    } finally {
      this.running--;
      this.waiting.shift()?.();
    }
  }
}
