/**
 * How often something a remote party can cause at will is reported: a warning line per ignored
 * message, an error reply per dropped message. Unthrottled, a flood is amplified into the logs and
 * back onto the wire (1,440 warning lines from one visitor in 30 s; 1,952 error replies to a burst
 * of 2,000 pings, issue 32). The first `burst` reports pass at once, then one per `intervalMs`;
 * what was held back is counted and handed to the next report, so nothing goes unaccounted.
 */
export const REPORT_THROTTLE_DEFAULTS = {
  burst: 5,
  intervalMs: 10_000,
} as const;

export interface ReportThrottleOptions {
  readonly burst?: number;
  readonly intervalMs?: number;
  /** Clock time in ms (a session's clock in tests); default `Date.now`. */
  readonly now?: () => number;
}

export class ReportThrottle {
  private readonly burst: number;
  private readonly intervalMs: number;
  private readonly now: () => number;
  private reported = 0;
  private lastAtMs = Number.NEGATIVE_INFINITY;
  private heldBack = 0;

  constructor(options: ReportThrottleOptions = {}) {
    this.burst = options.burst ?? REPORT_THROTTLE_DEFAULTS.burst;
    this.intervalMs = options.intervalMs ?? REPORT_THROTTLE_DEFAULTS.intervalMs;
    this.now = options.now ?? Date.now;
  }

  /**
   * One more occurrence: null when it is not to be reported, otherwise how many occurrences were
   * held back since the last report (report them with this one).
   */
  take(): number | null {
    const now = this.now();
    if (this.reported >= this.burst && now - this.lastAtMs < this.intervalMs) {
      this.heldBack++;
      return null;
    }
    this.reported++;
    this.lastAtMs = now;
    const held = this.heldBack;
    this.heldBack = 0;
    return held;
  }
}
