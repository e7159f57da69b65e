/**
 * Drives a frame source from a Clock at exactly 25 fps. Frame n is due at
 * `startedAtMs + n * 40` (absolute targets, so timer lateness never accumulates into drift);
 * it is rendered `renderLeadMs` before its due time and emitted at it. The frame's content is
 * decided when its render starts; the picture itself may be rasterised on a render worker
 * thread (render-pool.ts) while the event loop carries on.
 */
import sharp from 'sharp';
import { Subject, type Observable } from 'rxjs';
import type { Clock, TimerHandle } from '../../core/clock.ts';
import type { FaceFrame, FaceFrameSource, FaceImageFormat, FaceSession, FaceTurnOptions } from '../../processors/avatar/face-model.ts';
import { FACE_TIMING } from '../../processors/avatar/face-model.ts';
import { rgbToI420 } from './i420.ts';

const SESSION_DEFAULTS = {
  /** How long before its due time a frame is rendered (render + JPEG must fit in it). */
  renderLeadMs: 32,
} as const;

/** Encodes an RGB frame to JPEG (libjpeg-turbo through sharp, off the main thread). */
export async function encodeJpeg(frame: FaceFrame, quality: number): Promise<FaceFrame> {
  const { width, height, data } = frame.image;
  const jpeg = await sharp(data, { raw: { width, height, channels: 3 } }).jpeg({ quality, chromaSubsampling: '4:2:0', optimiseCoding: false }).toBuffer();
  return { ...frame, image: { width, height, format: 'jpeg', data: new Uint8Array(jpeg.buffer, jpeg.byteOffset, jpeg.length) } };
}

export class ClockedFaceSession implements FaceSession {
  readonly startedAtMs: number;
  private readonly subject = new Subject<FaceFrame>();
  readonly frames: Observable<FaceFrame> = this.subject.asObservable();
  private timer: TimerHandle | undefined;
  private nextIndex = 0;
  private closed = false;
  private ending: (() => void) | null = null;
  /** Bumped by cancel(): a speech frame rendered before a cancel is not played after it. */
  private cancels = 0;
  private endPromise: Promise<void> | null = null;
  private readonly convertToI420: boolean;
  private readonly encodeHere: boolean;

  constructor(
    private readonly source: FaceFrameSource,
    private readonly clock: Clock,
    readonly imageFormat: FaceImageFormat,
    private readonly jpegQuality: number,
  ) {
    // Frame 0 gets the same render lead as every other frame: due at once, it was always late
    // by its own render (and the first interval a client saw was short by as much).
    this.startedAtMs = clock.now() + SESSION_DEFAULTS.renderLeadMs;
    // A source that can make JPEG or I420 itself does (on its render worker); one that cannot
    // makes RGB, encoded or converted here, on this thread.
    if (imageFormat !== 'rgb') source.setImageFormat?.(imageFormat, jpegQuality);
    this.convertToI420 = imageFormat === 'i420' && !source.setImageFormat;
    this.encodeHere = imageFormat === 'jpeg' && !source.setImageFormat;
    // Encoded here, each picture is done with before the next is rendered (produce() awaits
    // it), so the RGB buffers can be reused; RGB sessions hand their pictures out and cannot.
    if (this.encodeHere) source.recycleImages?.(2);
    this.schedule();
  }

  get width(): number { return this.source.width; }
  get height(): number { return this.source.height; }

  startTurn(options?: FaceTurnOptions): void { this.source.startTurn(options); }
  pushAudio(pcm16k: Int16Array, turn?: FaceTurnOptions): void { if (!this.closed) this.source.pushAudio(pcm16k, turn); }
  endTurn(): void { this.source.endTurn(); }
  listen(pcm16k: Int16Array | null): void { if (!this.closed) this.source.listen?.(pcm16k); }
  cancel(): boolean {
    if (this.closed) return false;
    this.cancels++;
    return this.source.cancel();
  }

  end(): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.source.endTurn();
    this.endPromise ??= new Promise<void>((resolve) => { this.ending = resolve; });
    return this.endPromise;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.clock.clearTimeout(this.timer);
    this.source.close?.();
    this.subject.complete();
    this.ending?.();
  }

  private dueMs(index: number): number {
    return this.startedAtMs + index * FACE_TIMING.frameDurationMs;
  }

  private schedule(): void {
    if (this.closed) return;
    const renderAt = this.dueMs(this.nextIndex) - SESSION_DEFAULTS.renderLeadMs;
    this.timer = this.clock.setTimeout(() => void this.produce(), Math.max(0, renderAt - this.clock.now()));
  }

  private async produce(): Promise<void> {
    if (this.closed) return;
    try {
      const cancels = this.cancels;
      let frame = await this.source.nextFrame();
      if (this.closed) return;
      if (this.encodeHere && frame.image.format === 'rgb') frame = await encodeJpeg(frame, this.jpegQuality);
      else if (this.convertToI420 && frame.image.format === 'rgb') {
        frame = { ...frame, image: { ...frame.image, format: 'i420', data: rgbToI420(frame.image.data, frame.image.width, frame.image.height) } };
      }
      const wait = this.dueMs(frame.index) - this.clock.now();
      if (wait > 0) await this.clock.sleep(wait);
      if (this.closed) return;
      if (cancels !== this.cancels && (frame.type === 'speech' || frame.type === 'speech-start')) {
        // Cancelled while it waited for its due time: its picture opens the fade, its audio is dropped.
        frame = { ...frame, type: 'fade-out', audio: new Int16Array(frame.audio.length) };
      }
      // Speech that became ready while this idle frame waited starts in its audio now, not
      // a frame and a render lead later.
      if (frame.type === 'idle' && this.source.startSpeechIn) frame = this.source.startSpeechIn(frame);
      this.nextIndex = frame.index + 1;
      this.subject.next(frame);
      if (this.ending && !this.source.busy) return this.close();
      this.schedule();
    } catch (err) {
      if (this.closed) return;
      this.closed = true;
      this.clock.clearTimeout(this.timer);
      this.source.close?.();
      this.subject.error(err);
      this.ending?.();
    }
  }
}
