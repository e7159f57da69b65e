/**
 * AvatarProcessor: put it after any TTS and the bot gets a face. It feeds the TTS audio (at
 * 16 kHz, with phoneme timings when the TTS gives them) to a face session and emits what the
 * session renders: for every 40 ms, an `output-image` and the `output-audio` that plays with
 * it, as a pair, so no transport can drift them apart. Idle frames (blinks, breathing) keep
 * the video alive between turns; they carry images only, so the output does not take silence
 * for speech.
 *
 * The face session is in-process (a FaceModel from the registry) or remote (over /realtime);
 * the processor only sees the FaceSession contract. `tts-stopped` is held until the turn's
 * last frame has been emitted, so the output stops "speaking" when the face does.
 */
import type { Subscription } from 'rxjs';
import { Resampler } from '../../core/audio.ts';
import { frame, type Direction, type Frame, type PhonemeTiming } from '../../core/frames.ts';
import { FrameProcessor, type ProcessorOptions } from '../../core/processor.ts';
import type { Clock } from '../../core/clock.ts';
import { FACE_TIMING, type FaceFrame, type FaceSession } from './face-model.ts';

/** Opens a face session on the pipeline's clock (in-process model or remote client). */
export type FaceSessionFactory = (clock: Clock) => Promise<FaceSession>;

export class AvatarProcessor extends FrameProcessor {
  private session: FaceSession | undefined;
  private subscription: Subscription | undefined;
  private resampler: Resampler | undefined;
  /** Audio (ms) of the current turn sent to the face, to place phoneme timings. */
  private turnMs = 0;
  private turnOpen = false;
  private heldStop: Frame | undefined;
  /** Turn whose speech frames are playing; after an interruption its late frames are muted. */
  private playingTurn: number | null = null;
  private cancelledTurn: number | null = null;
  /** Frames emitted (diagnostics, benchmarks). */
  framesOut = 0;

  constructor(private readonly openSession: FaceSessionFactory, options: ProcessorOptions = {}) {
    super(options);
  }

  protected override async onStart(): Promise<void> {
    const session = await this.openSession(this.clock);
    this.session = session;
    this.subscription = session.frames.subscribe((f) => this.emitFrame(f));
  }

  protected override async onEnd(): Promise<void> {
    await this.session?.end();
    this.release();
  }

  protected override onCancel(): void {
    this.session?.close();
    this.release();
  }

  protected override process(f: Frame, direction: Direction): void {
    if (direction === 'upstream') return this.push(f, direction);
    switch (f.type) {
      case 'tts-started':
        this.session?.startTurn();
        this.turnOpen = true;
        this.turnMs = 0;
        break;
      case 'tts-audio':
        this.feed(f.pcm, f.sampleRate, f.channels, f.phonemes);
        // The words travel on: the output learns what was said from the paired frames' timing.
        if (f.words?.length) this.push(frame('tts-audio', { pcm: new Int16Array(0), sampleRate: f.sampleRate, channels: 1, words: f.words }));
        return;
      case 'tts-stopped':
        if (this.turnOpen) {
          this.turnOpen = false;
          this.session?.endTurn();
          this.heldStop = f;
          return;
        }
        break;
      case 'interruption':
        this.session?.cancel();
        this.cancelledTurn = this.playingTurn;
        this.turnOpen = false;
        this.heldStop = undefined;
        break;
      default:
        break;
    }
    this.push(f, direction);
  }

  private feed(pcm: Int16Array, sampleRate: number, channels: number, phonemes: readonly PhonemeTiming[] | undefined): void {
    if (!this.session || channels !== 1) return;
    let audio = pcm;
    if (sampleRate !== FACE_TIMING.audioSampleRate) {
      if (!this.resampler || this.resampler.fromRate !== sampleRate) this.resampler = new Resampler(sampleRate, FACE_TIMING.audioSampleRate);
      audio = this.resampler.process(pcm);
    }
    if (!this.turnOpen) {
      this.session.startTurn();
      this.turnOpen = true;
      this.turnMs = 0;
    }
    const offset = this.turnMs;
    const shifted = phonemes?.map((p) => ({ ...p, startMs: p.startMs + offset, endMs: p.endMs + offset }));
    this.session.pushAudio(audio, shifted?.length ? { phonemes: shifted } : undefined);
    this.turnMs += (audio.length / FACE_TIMING.audioSampleRate) * 1000;
  }

  private emitFrame(frameIn: FaceFrame): void {
    let f = frameIn;
    this.framesOut++;
    let speech = f.type === 'speech' || f.type === 'speech-start';
    if (speech && f.turnId !== null && f.turnId === this.cancelledTurn) {
      // A remote face may still deliver frames it rendered before it heard the cancel: the
      // picture is shown as the start of the fade, the audio is not played.
      f = { ...f, type: 'fade-out' };
      speech = false;
    } else {
      this.cancelledTurn = null;
    }
    if (speech) this.playingTurn = f.turnId;
    else if (f.type !== 'fade-out') this.playingTurn = null;
    this.push(frame('output-image', { ...f.image, frameIndex: f.index, frameType: f.type }, { pts: f.ptsMs }));
    if (speech) {
      this.push(frame('output-audio', { pcm: f.audio, sampleRate: FACE_TIMING.audioSampleRate, channels: 1 }, { pts: f.ptsMs }));
    }
    if (f.final && this.heldStop) {
      const stop = this.heldStop;
      this.heldStop = undefined;
      this.push(stop);
    }
  }

  private release(): void {
    this.subscription?.unsubscribe();
    this.subscription = undefined;
    this.session = undefined;
  }
}
