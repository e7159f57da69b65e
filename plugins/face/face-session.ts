/**
 * Drives a frame source from a Clock at exactly 25 fps. Frame n is due at
 * `startedAtMs + n * 40` (absolute targets, so timer lateness never accumulates into drift);
 * it is rendered `renderLeadMs` before its due time and emitted at it. The frame's content is
 * decided when its render starts; the picture itself may be rasterised on a render worker
 * thread (render-pool.ts) while the event loop carries on.
 *
 * Speech starts between frames. A turn that becomes ready to play while the face idles does not
 * wait for the next frame's due time (0-40 ms, 20 on average, at the start of every answer): the
 * frame rendered or being rendered goes out as soon as it can carry the turn's first audio
 * (`FaceFrameSource.startSpeechIn`), or, when no frame is on its way, the next one is rendered at
 * once and goes out when ready. The grid moves with it (the frames after it are due 40 ms apart
 * from there: `startedAtMs` moves earlier by the same amount) and moves back when the face is
 * idle again, one idle frame later than its interval, so over a session the frames keep to 25
 * fps of the clock (a receiver that plays frames on its own 25 fps clock does not fall behind).
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
  /** Clock time of frame 0 on the grid when no speech started between frames. */
  private readonly gridStartMs: number;
  /** How much earlier than that grid the frames are due now (speech started between frames). */
  private shiftMs = 0;
  private readonly subject = new Subject<FaceFrame>();
  readonly frames: Observable<FaceFrame> = this.subject.asObservable();
  private timer: TimerHandle | undefined;
  private nextIndex = 0;
  private closed = false;
  private ending: (() => void) | null = null;
  /** Bumped by cancel(): a speech frame rendered before a cancel is not played after it. */
  private cancels = 0;
  private endPromise: Promise<void> | null = null;
  /** A frame is being rendered or waits for its due time (between the timer and its emission). */
  private inFlight = false;
  /** Wakes a rendered frame waiting for its due time (speech may start in it now). */
  private wake: (() => void) | null = null;
  /** The frame on its way was rendered early because a turn became ready: it goes out when ready. */
  private startingEarly = false;
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
    this.gridStartMs = clock.now() + SESSION_DEFAULTS.renderLeadMs;
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

  /** Clock time of frame 0 as the frames are due now: frame n is due at `startedAtMs + n * 40`. */
  get startedAtMs(): number { return this.gridStartMs - this.shiftMs; }
  get width(): number { return this.source.width; }
  get height(): number { return this.source.height; }

  startTurn(options?: FaceTurnOptions): void { this.source.startTurn(options); }
  pushAudio(pcm16k: Int16Array, turn?: FaceTurnOptions): void {
    if (this.closed) return;
    this.source.pushAudio(pcm16k, turn);
    this.speechMayStart();
  }
  endTurn(): void {
    this.source.endTurn();
    if (!this.closed) this.speechMayStart();
  }
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
    this.wake?.();
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

  /**
   * A turn may have become ready to play: a frame waiting for its due time is woken (it takes the
   * turn if it can), and when no frame is on its way the next one is rendered now.
   */
  private speechMayStart(): void {
    if (!this.source.canStartSpeech?.()) return;
    if (this.inFlight) {
      this.wake?.();
      return;
    }
    this.clock.clearTimeout(this.timer);
    this.timer = undefined;
    this.startingEarly = true;
    void this.produce();
  }

  /**
   * Resolves with the frame to emit when it should go out: at its due time, or sooner when it
   * starts a turn's speech (an idle frame that takes a ready turn, or a frame rendered early for
   * one); then the grid moves so that the frame is due now.
   */
  private async untilDue(rendered: FaceFrame): Promise<FaceFrame | null> {
    let frame = rendered;
    for (;;) {
      if (this.closed) return null;
      if (frame.type === 'idle' && this.source.startSpeechIn) frame = this.source.startSpeechIn(frame);
      const wait = this.dueMs(frame.index) - this.clock.now();
      const early = frame.type === 'speech-start' && (frame !== rendered || this.startingEarly);
      if (early && wait > 0) this.shiftMs += wait;
      if (early || wait <= 0) return frame;
      await new Promise<void>((resolve) => {
        const timer = this.clock.setTimeout(() => { this.wake = null; resolve(); }, wait);
        this.wake = () => { this.wake = null; this.clock.clearTimeout(timer); resolve(); };
      });
    }
  }

  private async produce(): Promise<void> {
    if (this.closed) return;
    this.inFlight = true;
    try {
      const cancels = this.cancels;
      let frame = await this.source.nextFrame();
      if (this.closed) return;
      if (this.encodeHere && frame.image.format === 'rgb') frame = await encodeJpeg(frame, this.jpegQuality);
      else if (this.convertToI420 && frame.image.format === 'rgb') {
        frame = { ...frame, image: { ...frame.image, format: 'i420', data: rgbToI420(frame.image.data, frame.image.width, frame.image.height) } };
      }
      const renderedSpeech = frame.type === 'speech' || frame.type === 'speech-start';
      // Speech that becomes ready while this idle frame waits starts in its audio, and the frame
      // goes out then, not at its due time (nor a frame and a render lead later).
      const ready = await this.untilDue(frame);
      if (ready === null) return;
      frame = ready;
      if (cancels !== this.cancels && renderedSpeech) {
        // Cancelled while it was rendered or waited for its due time: its picture opens the fade,
        // its audio is dropped. (An idle frame that took a turn after the cancel plays it.)
        frame = { ...frame, type: 'fade-out', audio: new Int16Array(frame.audio.length) };
      }
      this.startingEarly = false;
      this.nextIndex = frame.index + 1;
      // Idle again after speech that started between frames: back to the session's grid (this
      // interval is longer by the shift), so the stream keeps 25 fps of the clock over time.
      if (frame.type === 'idle' && this.shiftMs > 0 && !this.source.busy) this.shiftMs = 0;
      this.subject.next(frame);
      if (this.ending && !this.source.busy) return this.close();
      // Still in flight while the frame is handed out: a turn pushed by a subscriber meanwhile
      // is taken by the next frame as usual, never by a second producer.
      this.inFlight = false;
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
