/**
 * Moves face frames into a media sink one at a time, in order: decode the picture, resample the
 * audio, hand both over together. The face session paces the stream (25 fps); the pump never
 * adds its own clock. When decoding falls behind, pictures are skipped (never audio), so sound
 * stays continuous and the picture catches up instead of drifting late. Frames that wait because
 * the sink paces the audio (it already holds enough ahead of playout) are not a decoding backlog:
 * skipping their pictures would not bring the sound sooner, so they keep them.
 */
import type { Observable, Subscription } from 'rxjs';
import { resolveOptions } from '../../core/options.ts';
import type { FaceFrame } from '../../processors/avatar/face-model.ts';
import { FrameAudioResampler, imageToI420, type I420Frame } from './avatar-media.ts';

export const FRAME_PUMP_DEFAULTS = {
  /** Frames allowed to wait for decoding; beyond this, waiting frames go on without their picture. */
  maxQueuedFrames: 3,
  /**
   * Audio a pacing sink holds ahead of playout (`AvatarMediaSink.audioAheadMs`) from which waiting
   * frames are the sink's pacing, not slow decoding: three frames of 40 ms. Without this, a stall
   * that left more frames waiting than the sink's audio queue holds made the backlog permanent
   * (the sink takes audio at real time, as fast as it arrives) and every later picture was skipped.
   */
  sinkAheadMs: 120,
  /**
   * Pictures go out this many frames (40 ms each) after their audio, to compensate receivers
   * that play video sooner than audio (see EMBEDDED_PUBLISHER_DEFAULTS). 0 sends each picture
   * with its own audio.
   */
  videoDelayFrames: 0,
} as const;

export interface AvatarMediaSink {
  /**
   * One face frame's picture (null when it was skipped or undecodable) and its 48 kHz 10 ms
   * audio chunks, in stream order. The pump waits for a returned promise before the next frame.
   */
  deliver(video: I420Frame | null, audio: readonly Int16Array[]): void | Promise<void>;
  /** Audio (ms) a sink that paces delivery holds ahead of playout; absent for sinks that never wait. */
  readonly audioAheadMs?: number;
  /**
   * Optional: the next chunks open a turn's speech (a `speech-start` frame). A sink that holds
   * silence ahead of playout may drop it here, so the speech is not heard after it.
   */
  speechStarting?(): void | Promise<void>;
}

export interface FramePumpStats {
  /** Face frames received. */
  frames: number;
  /** Pictures delivered. */
  videoFrames: number;
  /** Pictures skipped to catch up with a backlog. */
  skippedVideoFrames: number;
  /** Pictures that failed to decode (the frame's audio still went out). */
  badImages: number;
  /** 10 ms audio chunks delivered. */
  audioChunks: number;
  /** Width and height of the last delivered picture. */
  width: number;
  height: number;
}

export interface FramePumpOptions {
  readonly maxQueuedFrames?: number;
  readonly videoDelayFrames?: number;
  /** Called for faults that do not stop the stream (an undecodable image, a failing sink call). */
  readonly onWarning?: (message: string, error: unknown) => void;
}

export class AvatarFramePump {
  readonly stats: FramePumpStats = { frames: 0, videoFrames: 0, skippedVideoFrames: 0, badImages: 0, audioChunks: 0, width: 0, height: 0 };
  /** Resolves when the stream completed (tail flushed) or the pump was stopped; carries the stream's error, if any. */
  readonly done: Promise<{ readonly error?: unknown }>;
  private readonly queue: FaceFrame[] = [];
  private readonly audio = new FrameAudioResampler();
  private readonly maxQueued: number;
  private readonly videoDelayFrames: number;
  /** Decoded pictures (or gaps) waiting out `videoDelayFrames`. */
  private readonly delayedPictures: (I420Frame | null)[] = [];
  private subscription: Subscription | undefined;
  private running = false;
  private completed = false;
  private stopped = false;
  private streamError: unknown;
  private resolveDone!: (value: { readonly error?: unknown }) => void;

  constructor(
    private readonly frames: Observable<FaceFrame>,
    private readonly sink: AvatarMediaSink,
    private readonly options: FramePumpOptions = {},
  ) {
    const { maxQueuedFrames, videoDelayFrames } = resolveOptions(FRAME_PUMP_DEFAULTS, options);
    this.maxQueued = maxQueuedFrames;
    this.videoDelayFrames = Math.max(0, Math.floor(videoDelayFrames));
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
  }

  start(): void {
    if (this.subscription || this.stopped) return;
    this.subscription = this.frames.subscribe({
      next: (frame) => {
        if (this.stopped) return;
        this.stats.frames++;
        this.queue.push(frame);
        void this.drain();
      },
      error: (error: unknown) => {
        this.streamError = error;
        this.completed = true;
        void this.drain();
      },
      complete: () => {
        this.completed = true;
        void this.drain();
      },
    });
  }

  /** Stops at once: no more frames are taken, queued ones are dropped. */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    this.queue.length = 0;
    this.subscription?.unsubscribe();
    if (!this.running) this.finish();
  }

  private async drain(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      while (!this.stopped && this.queue.length > 0) {
        const frame = this.queue.shift()!;
        // Frames still waiting behind this one mean decoding is behind real time, unless the sink
        // made them wait while holding audio ahead of playout.
        const skipPicture = this.queue.length >= this.maxQueued && (this.sink.audioAheadMs ?? 0) < FRAME_PUMP_DEFAULTS.sinkAheadMs;
        let picture: I420Frame | null = null;
        if (skipPicture) this.stats.skippedVideoFrames++;
        else {
          try {
            picture = await imageToI420(frame.image);
          } catch (error) {
            this.stats.badImages++;
            this.options.onWarning?.(`frame ${frame.index}: image could not be decoded`, error);
          }
        }
        if (this.stopped) break;
        const chunks = this.audio.push(frame.audio);
        if (frame.type === 'speech-start') await this.speechStarting();
        if (this.stopped) break;
        this.delayedPictures.push(picture);
        const due = this.delayedPictures.length > this.videoDelayFrames ? this.delayedPictures.shift()! : null;
        await this.deliver(due, chunks);
      }
      if (this.completed && !this.stopped) {
        await this.deliver(this.delayedPictures.shift() ?? null, this.audio.flush());
        // Pictures still held back go out at once, in order: the stream has ended.
        for (const picture of this.delayedPictures.splice(0)) if (picture) await this.deliver(picture, []);
        this.stopped = true;
      }
    } finally {
      this.running = false;
      if (this.stopped) this.finish();
    }
  }

  private async deliver(picture: I420Frame | null, chunks: readonly Int16Array[]): Promise<void> {
    try {
      await this.sink.deliver(picture, chunks);
      if (picture) {
        this.stats.videoFrames++;
        this.stats.width = picture.width;
        this.stats.height = picture.height;
      }
      this.stats.audioChunks += chunks.length;
    } catch (error) {
      this.options.onWarning?.('media sink failed', error);
    }
  }

  private async speechStarting(): Promise<void> {
    try {
      await this.sink.speechStarting?.();
    } catch (error) {
      this.options.onWarning?.('media sink failed', error);
    }
  }

  private finish(): void {
    this.subscription?.unsubscribe();
    this.resolveDone(this.streamError === undefined ? {} : { error: this.streamError });
  }
}
