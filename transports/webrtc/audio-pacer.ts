/**
 * Sends a face stream's audio to a WebRTC audio source 10 ms at a time, when it is due, instead
 * of a frame's 40 ms at once.
 *
 * Why. A frame carries 40 ms of audio. Written whole, its four 10 ms chunks reach the receiver
 * together every 40 ms; libwebrtc's receive jitter buffer (NetEq) sizes itself for that spread and
 * holds about 20 ms more than it needs for audio that arrives as it is captured (measured at the
 * visitor, docs/sessions.md). And a sender stamps audio by its sample count, so a turn's first
 * speech plays after all the silence sent before it: an idle frame's 40 ms of silence sent at once
 * is a wait of up to 40 ms at the start of an answer that starts between frames
 * (plugins/face/face-session.ts).
 *
 * How. A frame's first chunk goes at once, the others one per `chunkMs` after it. The next frame
 * sends whatever of the previous one is still waiting first (so a late timer, or frames that
 * come faster than real time after a stall, never build a queue: audio is never held back by
 * more than the rest of one frame). When a turn's speech starts, the silence still waiting is
 * dropped (it was never sent, so the receiver's timeline never had it) and the speech follows the
 * silence already sent: at most one chunk.
 */
import type { Clock, TimerHandle } from '../../core/clock.ts';

export class AudioPacer {
  private pending: Int16Array[] = [];
  private timer: TimerHandle | undefined;
  /** When the next pending chunk is due (clock ms). */
  private nextAt = 0;
  private stopped = false;
  /** Silent chunks dropped at the start of speech. */
  droppedChunks = 0;

  /**
   * @param send writes one chunk to the audio source
   * @param chunkMs the duration of one chunk (ms); 0 sends every chunk at once, as delivered
   */
  constructor(
    private readonly send: (chunk: Int16Array) => void,
    private readonly chunkMs: number,
    private readonly clock: Clock,
  ) {}

  /** One frame's chunks, in order. */
  deliver(chunks: readonly Int16Array[]): void {
    if (this.stopped || chunks.length === 0) return;
    this.flush();
    if (this.chunkMs <= 0) {
      for (const chunk of chunks) this.send(chunk);
      return;
    }
    this.send(chunks[0]!);
    this.pending = chunks.slice(1);
    this.nextAt = this.clock.now() + this.chunkMs;
    this.arm();
  }

  /** A turn's speech comes next: silence still waiting is dropped (sound still waiting is sent). */
  speechStarting(): void {
    if (this.pending.every(isSilent)) {
      this.droppedChunks += this.pending.length;
      this.pending = [];
      this.disarm();
    } else this.flush();
  }

  /** The stream ended: what waits is sent at once, and nothing after. */
  finish(): void {
    this.flush();
    this.stop();
  }

  /** Nothing more is sent; what waits is dropped and the timer stopped. */
  stop(): void {
    this.stopped = true;
    this.pending = [];
    this.disarm();
  }

  /** Chunks delivered and not yet sent. */
  get pendingChunks(): number {
    return this.pending.length;
  }

  private flush(): void {
    const pending = this.pending;
    this.pending = [];
    this.disarm();
    for (const chunk of pending) this.send(chunk);
  }

  private disarm(): void {
    this.clock.clearTimeout(this.timer);
    this.timer = undefined;
  }

  private arm(): void {
    if (this.timer !== undefined || this.pending.length === 0 || this.stopped) return;
    this.timer = this.clock.setTimeout(() => {
      this.timer = undefined;
      const now = this.clock.now();
      // Every chunk whose time has come (a late timer sends the ones it missed), then the next.
      while (this.pending.length > 0 && this.nextAt <= now + 1) {
        this.send(this.pending.shift()!);
        this.nextAt += this.chunkMs;
      }
      this.arm();
    }, Math.max(0, this.nextAt - this.clock.now()));
  }
}

function isSilent(samples: Int16Array): boolean {
  for (let i = 0; i < samples.length; i++) if (samples[i] !== 0) return false;
  return true;
}
