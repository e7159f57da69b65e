/**
 * Chunks on a fixed timeline from the first (absolute due times, not each re-armed after the
 * last), as every streaming fake sends its audio.
 *
 * A provider's audio keeps coming while our process is stalled and waits in the socket; the
 * fakes live in the stalled process. Re-armed after the last, one stall under load delayed every
 * later chunk and starved the face (an underrun: silence in mid-reply; #23, runs R1 and earlier).
 * With due times counted from the first chunk, a stall delays what was due during it, and the
 * chunks then come at once, as a provider's would out of the socket.
 *
 * On a virtual clock the two are the same: every sleep ends exactly when it is due.
 */
export class Pacing {
  private firstAt = 0;
  private claimed = 0;

  /** `now`: the fake's clock (`clock.now` or `performance.now`); `intervalMs`: between chunks. */
  constructor(
    private readonly now: () => number,
    private readonly intervalMs: number,
  ) {}

  /** Claims the next chunk's slot: the time until it is due (ms, never negative; the first's slot is now). */
  slot(): number {
    const now = this.now();
    if (this.claimed === 0) this.firstAt = now;
    return Math.max(0, this.firstAt + this.claimed++ * this.intervalMs - now);
  }

  /** The time until the slot after the last claimed one is due (ms, never negative), without claiming it. */
  untilNext(): number {
    return Math.max(0, this.firstAt + this.claimed * this.intervalMs - this.now());
  }
}
