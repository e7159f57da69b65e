/**
 * Cuts a stream of audio into utterances for the offline recognisers (`stt:local`, `stt:moonshine`):
 * resampled to 16 kHz, judged speech or not by the WebRTC VAD in 10 ms windows, kept from a short
 * pre-roll before the first speech, and ended by the recogniser (`take()`, on the pipeline's
 * `finalize()`) or by itself (`endpoint`) after `autoEndpointMs` of silence or at `maxUtteranceMs`.
 */
import { Subject, type Observable } from 'rxjs';
import { Resampler } from '../../core/audio.ts';
import type { STTStream, TranscriptEvent } from '../../processors/services.ts';
import { WebRtcVADAnalyzer } from './webrtc-vad.ts';

export const UTTERANCE_SAMPLE_RATE = 16_000;
const WINDOW_MS = 10;

export interface UtteranceCutterSettings {
  /** Audio kept from before speech starts, so the first consonant is not cut. */
  readonly preRollMs: number;
  /** Silence after speech that ends an utterance by itself. */
  readonly autoEndpointMs: number;
  /** An utterance ends when it gets this long even if speech goes on. */
  readonly maxUtteranceMs: number;
}

export interface Utterance {
  /** 16 kHz audio from the pre-roll to the end. */
  readonly pcm: Int16Array;
  readonly speechMs: number;
  /** Ms of audio received when its speech (with the pre-roll) started, and when it ended. */
  readonly startMs: number;
  readonly endMs: number;
}

export interface UtteranceEvents {
  /** The utterance reached an end by itself: the recogniser takes it. */
  endpoint(): void;
  /** After each 10 ms window of an utterance that has speech. */
  window?(): void;
}

export class UtteranceCutter {
  private readonly resampler: Resampler | undefined;
  private readonly vad = new WebRtcVADAnalyzer({ sampleRate: UTTERANCE_SAMPLE_RATE, windowMs: WINDOW_MS });
  private pending = new Int16Array(0);
  private windows: Int16Array[] = [];
  /** Samples of the current utterance. */
  samples = 0;
  /** Samples of the current utterance up to the end of its last speech window. */
  speechEndSamples = 0;
  speechMs = 0;
  /** Silence since the last speech window. */
  silenceMs = 0;
  /** Ms of audio received in all. */
  receivedMs = 0;
  /** Ms of audio received when the current utterance's speech (with its pre-roll) started. */
  startMs = 0;
  /** Counts the utterances taken: what was recognised of an utterance belongs to this number. */
  utterance = 0;

  constructor(
    inputRate: number,
    private readonly settings: UtteranceCutterSettings,
    private readonly events: UtteranceEvents,
  ) {
    this.resampler = inputRate === UTTERANCE_SAMPLE_RATE ? undefined : new Resampler(inputRate, UTTERANCE_SAMPLE_RATE);
  }

  push(pcm: Int16Array): void {
    const audio = this.resampler ? this.resampler.process(pcm) : pcm;
    const joined = new Int16Array(this.pending.length + audio.length);
    joined.set(this.pending);
    joined.set(audio, this.pending.length);
    const window = this.vad.windowSamples;
    let offset = 0;
    for (; offset + window <= joined.length; offset += window) this.onWindow(joined.slice(offset, offset + window));
    this.pending = joined.slice(offset);
  }

  /** The current utterance's audio so far (it goes on). */
  audio(): Int16Array {
    const pcm = new Int16Array(this.samples);
    this.windows.reduce((at, w) => (pcm.set(w, at), at + w.length), 0);
    return pcm;
  }

  /** Ends the current utterance and returns it (its `speechMs` may be 0); the next one starts. */
  take(): Utterance {
    const taken = { pcm: this.audio(), speechMs: this.speechMs, startMs: this.startMs, endMs: this.receivedMs };
    this.windows = [];
    this.samples = 0;
    this.speechEndSamples = 0;
    this.speechMs = 0;
    this.silenceMs = 0;
    this.utterance++;
    return taken;
  }

  private onWindow(window: Int16Array): void {
    this.receivedMs += WINDOW_MS;
    const speech = this.vad.confidence(window) >= 0.5;
    this.windows.push(window);
    this.samples += window.length;
    if (speech) {
      if (this.speechMs === 0) this.startMs = this.receivedMs - (this.samples / UTTERANCE_SAMPLE_RATE) * 1000;
      this.speechMs += WINDOW_MS;
      this.silenceMs = 0;
      this.speechEndSamples = this.samples;
    } else {
      this.silenceMs += WINDOW_MS;
    }
    if (this.speechMs === 0) {
      // Before speech only a short pre-roll is worth keeping.
      const keep = Math.ceil(this.settings.preRollMs / WINDOW_MS);
      if (this.windows.length > keep) this.samples -= this.windows.shift()!.length;
      return;
    }
    const utteranceMs = (this.samples / UTTERANCE_SAMPLE_RATE) * 1000;
    if (this.silenceMs >= this.settings.autoEndpointMs || utteranceMs >= this.settings.maxUtteranceMs) return this.events.endpoint();
    this.events.window?.();
  }
}

/**
 * The stream shell both offline recognisers share: audio goes to the cutter, `finalize()` and
 * `close()` end the utterance, and `close()` completes the transcripts once what was pending is out.
 */
export abstract class UtteranceStream implements STTStream {
  protected readonly subject = new Subject<TranscriptEvent>();
  readonly transcripts: Observable<TranscriptEvent> = this.subject.asObservable();
  protected closed = false;
  protected abstract readonly cutter: UtteranceCutter;

  /** Ends the cutter's current utterance and starts recognising it. */
  protected abstract endUtterance(): void;
  /** Settles when every transcript under way has been sent. */
  protected abstract pendingOut(): Promise<void>;

  sendAudio(pcm: Int16Array): void {
    if (!this.closed) this.cutter.push(pcm);
  }

  finalize(): void {
    if (!this.closed) this.endUtterance();
  }

  /** Like a provider's close-stream: pending speech is still transcribed before completing. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.endUtterance();
    this.closed = true;
    await this.pendingOut();
    this.subject.complete();
  }
}
