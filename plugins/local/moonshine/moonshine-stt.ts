/**
 * `stt:moonshine`: offline speech-to-text of open vocabulary (English), with the Moonshine tiny
 * model run by onnxruntime-node in a worker thread (moonshine-engine.ts). Unlike `stt:local`'s
 * phrase list it transcribes whatever is said, with punctuation and case, and it gives the turn
 * processor words in time for its decision:
 *
 * - the incoming audio is cut into utterances by the WebRTC VAD (10 ms windows), by `finalize()`
 *   (the STT processor calls it when the pipeline's VAD says the user stopped), after
 *   `autoEndpointMs` of silence, or at `maxUtteranceMs`;
 * - after `interimSilenceMs` of silence (100 ms: before the pipeline VAD's 200 ms pause, when
 *   the turn analyzer reads the words) the utterance so far is recognised and sent as an interim
 *   result; `finalize()` then reuses that text when no speech came since (the final costs nothing
 *   more), or recognises the utterance again when it did;
 * - the model is given the utterance with `padMs` of silence on each side: without it, short
 *   utterances ("How are you?" in 0.5 s) often came out empty or as another word.
 *
 * Speech that yields no words is transcribed `[unrecognised speech]` (confidence 0), as
 * `stt:local` does, or dropped with `unrecognised: 'ignore'`. Measurements: docs/offline-engines.md.
 */
import { abortError } from '../../../core/clock.ts';
import { resolveOptions } from '../../../core/options.ts';
import type { STTService, STTStream, STTStreamOptions, TranscriptEvent } from '../../../processors/services.ts';
import { LocalEngineError } from '../local-engine-error.ts';
import { UNRECOGNISED_SPEECH } from '../unrecognised-speech.ts';
import { UtteranceCutter, UtteranceStream } from '../utterance-cutter.ts';
import { MOONSHINE_ENGINE_DEFAULTS, MOONSHINE_SAMPLE_RATE, sharedMoonshineEngine, type MoonshineEngine, type MoonshineModelName } from './moonshine-engine.ts';

export const MOONSHINE_STT_DEFAULTS = {
  /** The model (`tiny`, or `base`: more accurate, slower). */
  model: MOONSHINE_ENGINE_DEFAULTS.model as MoonshineModelName,
  /** Threads for one recognition. */
  threads: MOONSHINE_ENGINE_DEFAULTS.threads as number,
  /** Silence after speech (ms) at which the words so far are sent as an interim result (with `interimResults`). */
  interimSilenceMs: 100,
  /** Silence after speech that ends an utterance without `finalize()`. Longer than a pipeline VAD's stop time. */
  autoEndpointMs: 1000,
  /** Less speech than this in an utterance (a click, a cough) is ignored. */
  minSpeechMs: 150,
  /** An utterance is recognised when it gets this long even if speech goes on. */
  maxUtteranceMs: 15_000,
  /** Audio kept from before speech starts, so the first consonant is not cut. */
  preRollMs: 200,
  /** Silence added before and after the utterance for the model. */
  padMs: 300,
  /** Decoding stops after this many tokens per second of audio (plus 4): a model looping on noise ends there. */
  maxTokensPerSecond: 8,
  /**
   * A transcript whose tokens' mean probability is under this is no words (the model's guess at a
   * click or a hum: 0.03-0.12 measured; espeak speech 0.22-0.81, human speech higher).
   */
  minConfidence: 0.2,
  /** What to do with speech that yields no words. */
  unrecognised: 'placeholder' as 'placeholder' | 'ignore',
} as const;

export interface MoonshineSTTOptions {
  readonly model?: MoonshineModelName;
  readonly threads?: number;
  readonly interimSilenceMs?: number;
  readonly autoEndpointMs?: number;
  readonly minSpeechMs?: number;
  readonly maxUtteranceMs?: number;
  readonly preRollMs?: number;
  readonly padMs?: number;
  readonly maxTokensPerSecond?: number;
  readonly minConfidence?: number;
  readonly unrecognised?: 'placeholder' | 'ignore';
  /** Default: the process-wide engine of the model (sharedMoonshineEngine). */
  readonly engine?: MoonshineEngine;
}

type Settings = { -readonly [K in keyof typeof MOONSHINE_STT_DEFAULTS]: (typeof MOONSHINE_STT_DEFAULTS)[K] };

export class MoonshineSTT implements STTService {
  readonly name = 'moonshine-stt';
  /** It ends every segment with `.` or `?`, finished or not (docs/behaviours.md). */
  readonly punctuation = 'segments' as const;
  readonly settings: Settings;
  private readonly engine: MoonshineEngine;

  constructor(options: MoonshineSTTOptions = {}) {
    const { engine, ...rest } = options;
    this.settings = resolveOptions(MOONSHINE_STT_DEFAULTS, rest) as Settings;
    for (const key of ['interimSilenceMs', 'autoEndpointMs', 'minSpeechMs', 'maxUtteranceMs', 'preRollMs', 'padMs', 'maxTokensPerSecond'] as const) {
      const value = this.settings[key];
      if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) throw new LocalEngineError('invalid_options', `${key} must be a number of at least 0, got ${JSON.stringify(value)}`);
    }
    if (this.settings.interimSilenceMs < 10) throw new LocalEngineError('invalid_options', `interimSilenceMs must be at least 10 (one VAD window), got ${this.settings.interimSilenceMs}`);
    if (!(this.settings.minConfidence >= 0 && this.settings.minConfidence <= 1)) throw new LocalEngineError('invalid_options', `minConfidence must be within 0-1, got ${JSON.stringify(this.settings.minConfidence)}`);
    if (this.settings.unrecognised !== 'placeholder' && this.settings.unrecognised !== 'ignore') {
      throw new LocalEngineError('invalid_options', `unrecognised must be placeholder or ignore, got ${JSON.stringify(this.settings.unrecognised)}`);
    }
    this.engine = engine ?? sharedMoonshineEngine({ model: this.settings.model, threads: this.settings.threads });
  }

  /** Loads the model now (the server does, when this is the deployment's speech-to-text). */
  warmUp(): Promise<void> {
    return this.engine.start();
  }

  async connect(options: STTStreamOptions, signal?: AbortSignal): Promise<STTStream> {
    if (signal?.aborted) throw abortError(signal.reason);
    if (options.language.toLowerCase().split(/[-_]/)[0] !== 'en') {
      throw new LocalEngineError('unsupported_language', `stt:moonshine recognises English only, got ${JSON.stringify(options.language)}`);
    }
    if (options.channels !== 1) throw new LocalEngineError('invalid_options', `stt:moonshine takes mono audio, got ${options.channels} channels`);
    if (!Number.isInteger(options.sampleRate) || options.sampleRate < 8000) {
      throw new LocalEngineError('unsupported_sample_rate', `sampleRate must be an integer of at least 8000 Hz, got ${options.sampleRate}`);
    }
    // The model loads at connect, not at the first utterance (and fails here when it cannot).
    await this.engine.start();
    if (signal?.aborted) throw abortError(signal.reason);
    return new MoonshineSTTStream(this.engine, options, this.settings);
  }
}

interface Recognition {
  /** Samples of the utterance it covers. */
  readonly samples: number;
  readonly result: Promise<{ text: string; confidence: number } | undefined>;
}

class MoonshineSTTStream extends UtteranceStream {
  protected readonly cutter: UtteranceCutter;
  /** The utterance's last recognition (interim), reused by its final when no speech came since. */
  private last: Recognition | undefined;
  /** Emissions in order: each waits for the one before. */
  private emissions: Promise<void> = Promise.resolve();
  /** An interim result was started in the current silence (one per pause). */
  private interimSent = false;

  constructor(
    private readonly engine: MoonshineEngine,
    private readonly options: STTStreamOptions,
    private readonly settings: Settings,
  ) {
    super();
    this.cutter = new UtteranceCutter(options.sampleRate, settings, {
      endpoint: () => this.endUtterance(),
      window: () => {
        const c = this.cutter;
        if (c.silenceMs === 0) this.interimSent = false;
        else if (options.interimResults && !this.interimSent && c.silenceMs >= settings.interimSilenceMs && c.speechMs >= settings.minSpeechMs) {
          this.interimSent = true;
          this.interim();
        }
      },
    });
  }

  protected pendingOut(): Promise<void> {
    return this.emissions;
  }

  /** Recognises the utterance so far and sends it as an interim result. */
  private interim(): void {
    const recognition = this.recognise(this.cutter.audio());
    this.last = recognition;
    const startMs = this.cutter.startMs;
    const endMs = this.cutter.receivedMs;
    const utterance = this.cutter.utterance;
    this.emit(async () => {
      const r = await recognition.result;
      // Sent only while its utterance is still the current one (its final has not gone out).
      if (r?.text && this.cutter.utterance === utterance && !this.closed) this.subject.next({ text: r.text, final: false, language: this.options.language, confidence: r.confidence, startMs, endMs });
    });
  }

  protected endUtterance(): void {
    const last = this.last;
    const reuse = last && last.samples >= this.cutter.speechEndSamples ? last : undefined;
    this.last = undefined;
    this.interimSent = false;
    const { pcm, speechMs, startMs, endMs } = this.cutter.take();
    if (speechMs < this.settings.minSpeechMs) return;
    const recognition = reuse ?? this.recognise(pcm);
    this.emit(async () => {
      const r = await recognition.result;
      if (!r) return;
      if (!r.text && this.settings.unrecognised === 'ignore') return;
      this.subject.next({ text: r.text || UNRECOGNISED_SPEECH, final: true, endOfUtterance: true, language: this.options.language, confidence: r.text ? r.confidence : 0, startMs, endMs });
    });
  }

  /** Starts recognising `pcm` (16 kHz), padded with silence on both sides. */
  private recognise(pcm: Int16Array): Recognition {
    const pad = Math.round((this.settings.padMs / 1000) * MOONSHINE_SAMPLE_RATE);
    const audio = new Float32Array(pcm.length + 2 * pad);
    for (let i = 0; i < pcm.length; i++) audio[pad + i] = pcm[i]! / 32768;
    const maxTokens = Math.ceil((audio.length / MOONSHINE_SAMPLE_RATE) * this.settings.maxTokensPerSecond) + 4;
    const result = this.engine.transcribe(audio, maxTokens).then(
      (r) => ({ text: r.confidence >= this.settings.minConfidence ? cleaned(r.text) : '', confidence: r.confidence }),
      (err: unknown) => {
        this.fail(err);
        return undefined;
      },
    );
    return { samples: pcm.length, result };
  }

  private emit(step: () => Promise<void>): void {
    this.emissions = this.emissions.then(step);
  }

  private fail(err: unknown): void {
    if (this.closed) return;
    this.closed = true;
    this.subject.error(err instanceof Error ? err : new LocalEngineError('engine_failure', String(err)));
  }
}

/** The model's text without stray spaces; text with no letter or digit is no words. */
function cleaned(text: string): string {
  const t = text.replace(/\s+/g, ' ').trim();
  return /[\p{L}\p{N}]/u.test(t) ? t : '';
}
