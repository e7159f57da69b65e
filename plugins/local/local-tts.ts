/**
 * `tts:local`: offline text-to-speech with eSpeak-NG (wasm, in a worker thread). Robotic but
 * intelligible, about 10x faster than real time, ~130 languages, and it knows exactly when each
 * phoneme starts, which is what the avatar's mouth needs.
 */
import { concat, Resampler } from '../../core/audio.ts';
import { abortError } from '../../core/clock.ts';
import { resolveOptions, type Resolved } from '../../core/options.ts';
import type { TTSEvent, TTSRequest, TTSService } from '../../processors/services.ts';
import { ESPEAK_SAMPLE_RATE, escapeForEspeak, sharedEspeakEngine, type EspeakEngine, type EspeakVoice } from './espeak-engine.ts';
import { EspeakTimeline, type TimelineUpdate } from './espeak-timeline.ts';
import { espeakVoiceFor } from './espeak-voices.ts';
import { LocalEngineError } from './local-engine-error.ts';

export const LOCAL_TTS_DEFAULTS = {
  /** Used when a request names no language. */
  language: 'en',
  /**
   * espeak voice used when a request has no `voiceId` (undefined = pick by language). Voice ids
   * are espeak voice names, optionally with a variant: `en-us`, `fr`, `en-us+f3`.
   */
  voice: undefined as string | undefined,
  /** Speaking rate in words per minute (espeak's default is 175). */
  rateWpm: 175,
  /** Base pitch, 0-100. */
  pitch: 50,
} as const;

export interface LocalTTSOptions {
  readonly language?: string;
  readonly voice?: string;
  readonly rateWpm?: number;
  readonly pitch?: number;
  /** Defaults to the process-wide engine. */
  readonly engine?: EspeakEngine;
}

export class LocalTTSService implements TTSService {
  readonly name = 'local-tts';
  private readonly engine: EspeakEngine;
  private readonly settings: Resolved<typeof LOCAL_TTS_DEFAULTS>;
  private voiceList: Promise<EspeakVoice[]> | undefined;

  constructor(options: LocalTTSOptions = {}) {
    this.engine = options.engine ?? sharedEspeakEngine();
    this.settings = resolveOptions(LOCAL_TTS_DEFAULTS, options);
    const { rateWpm, pitch } = this.settings;
    if (!(rateWpm >= 80 && rateWpm <= 450)) throw new LocalEngineError('invalid_options', `rateWpm must be within 80-450, got ${rateWpm}`);
    if (!(pitch >= 0 && pitch <= 100)) throw new LocalEngineError('invalid_options', `pitch must be within 0-100, got ${pitch}`);
  }

  /** Starts the engine ahead of the first sentence so its ~200 ms start-up is not heard. */
  async warmUp(): Promise<void> {
    await this.engine.start();
    this.voiceList ??= this.engine.voices();
    await this.voiceList;
  }

  /** The espeak voice a request would use. */
  async voiceFor(request: Pick<TTSRequest, 'voiceId' | 'language'>): Promise<string> {
    if (request.voiceId) return request.voiceId;
    if (this.settings.voice) return this.settings.voice;
    this.voiceList ??= this.engine.voices();
    return espeakVoiceFor(request.language ?? this.settings.language, await this.voiceList);
  }

  async *synthesize(request: TTSRequest): AsyncGenerator<TTSEvent> {
    const { sampleRate, signal } = request;
    if (!Number.isInteger(sampleRate) || sampleRate < 8000 || sampleRate > 192000) {
      throw new LocalEngineError('unsupported_sample_rate', `sampleRate must be an integer within 8000-192000 Hz, got ${sampleRate}`);
    }
    const voice = await this.voiceFor(request);
    if (signal?.aborted) throw abortError(signal.reason);
    const text = request.text.trim();
    if (!text) return;

    const { escaped, originalIndex } = escapeForEspeak(text);
    const timeline = new EspeakTimeline(text, originalIndex);
    const resampler = sampleRate === ESPEAK_SAMPLE_RATE ? undefined : new Resampler(ESPEAK_SAMPLE_RATE, sampleRate);
    const held = new HeldAudio();
    let nativeSamples = 0;
    const chunks = this.engine.synthesize(escaped, { voice, rate: this.settings.rateWpm, pitch: this.settings.pitch, signal });
    for await (const chunk of chunks) {
      nativeSamples += chunk.pcm.length;
      yield* timingEvents(timeline.push(chunk.events));
      held.push(resampler ? resampler.process(chunk.pcm) : chunk.pcm);
      // A phoneme or word is final only once the next one starts. Audio is held back from the
      // start of the first unfinished one, so every timing arrives before the audio it starts in
      // (consumers attach timings to the audio chunk they start in).
      const pcm = held.take(Math.floor((timeline.settledMs * sampleRate) / 1000));
      if (pcm.length > 0) yield { type: 'audio', pcm, sampleRate };
    }
    yield* timingEvents(timeline.finish((nativeSamples / ESPEAK_SAMPLE_RATE) * 1000));
    if (resampler) held.push(resampler.flush());
    const rest = held.take(Infinity);
    if (rest.length > 0) yield { type: 'audio', pcm: rest, sampleRate };
  }
}

/** Synthesised audio not yet handed out. */
class HeldAudio {
  private parts: Int16Array[] = [];
  private released = 0;
  private buffered = 0;

  push(pcm: Int16Array): void {
    if (pcm.length === 0) return;
    this.parts.push(pcm);
    this.buffered += pcm.length;
  }

  /** Hands out the audio up to sample `untilSample` of the stream (counted from its start). */
  take(untilSample: number): Int16Array {
    const count = Math.max(0, Math.min(this.buffered, untilSample - this.released));
    const all = concat(this.parts);
    this.parts = count < all.length ? [all.subarray(count)] : [];
    this.buffered -= count;
    this.released += count;
    return all.slice(0, count);
  }
}

function* timingEvents(update: TimelineUpdate): Generator<TTSEvent> {
  if (update.phonemes.length > 0) yield { type: 'phonemes', phonemes: update.phonemes };
  if (update.words.length > 0) yield { type: 'words', words: update.words };
}
