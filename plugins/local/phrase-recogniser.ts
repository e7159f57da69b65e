/**
 * Isolated-phrase recogniser: each phrase of a small list is synthesised once with the offline
 * TTS and kept as an MFCC template; an utterance is the phrase whose template it matches best by
 * dynamic time warping, when that match is close enough. It recognises what our own offline TTS
 * says (the end-to-end tests' "users") reliably; a human voice matches poorly (see the docs).
 */
import { concat, resample } from '../../core/audio.ts';
import { sharedEspeakEngine, type EspeakEngine } from './espeak-engine.ts';
import { LocalTTSService } from './local-tts.ts';
import { dtwDistance, FEATURE_SAMPLE_RATE, mfcc, trimSilence } from './speech-features.ts';

export interface PhraseMatch {
  readonly phrase: string;
  readonly distance: number;
  /** In (0, 1]: 1 - distance / (2 x maxDistance). */
  readonly confidence: number;
}

export interface PhraseRecogniserOptions {
  readonly phrases: readonly string[];
  /** Language of the phrases (picks the template voice). */
  readonly language: string;
  /** espeak voices to make templates with (default: the language's voice). */
  readonly voices?: readonly string[];
  /** Best DTW distance accepted; calibrated on espeak voices (docs/offline-engines.md). */
  readonly maxDistance: number;
  readonly engine?: EspeakEngine;
}

/** Templates are expensive (a synthesis each) and identical across sessions: cached per process. */
const templateCache = new Map<string, Promise<Float32Array[]>>();

export class PhraseRecogniser {
  private readonly templates: Promise<Array<{ phrase: string; features: Float32Array[] }>>;

  constructor(private readonly options: PhraseRecogniserOptions) {
    const tts = new LocalTTSService({ language: options.language, engine: options.engine ?? sharedEspeakEngine() });
    const voices = options.voices?.length ? options.voices : [undefined];
    const jobs = options.phrases.flatMap((phrase) => voices.map(async (voice) => ({ phrase, features: await template(tts, phrase, options.language, voice) })));
    this.templates = Promise.all(jobs);
    // Failures surface on the first recognition; nothing may go unhandled meanwhile.
    this.templates.catch(() => undefined);
  }

  /** Resolves once every template is ready (or rejects with the synthesis error). */
  async ready(): Promise<void> {
    await this.templates;
  }

  /** Best phrase for 16 kHz speech, or undefined when nothing is close enough. */
  async recognise(pcm16k: Int16Array): Promise<PhraseMatch | undefined> {
    const templates = await this.templates;
    const features = mfcc(trimSilence(pcm16k));
    let best: PhraseMatch | undefined;
    for (const { phrase, features: reference } of templates) {
      const distance = dtwDistance(features, reference);
      if (!best || distance < best.distance) best = { phrase, distance, confidence: Math.max(0, 1 - distance / (2 * this.options.maxDistance)) };
    }
    return best && best.distance <= this.options.maxDistance ? best : undefined;
  }
}

function template(tts: LocalTTSService, phrase: string, language: string, voice: string | undefined): Promise<Float32Array[]> {
  const key = JSON.stringify([phrase, language, voice ?? '']);
  let cached = templateCache.get(key);
  if (!cached) {
    cached = (async () => {
      const parts: Int16Array[] = [];
      let rate = FEATURE_SAMPLE_RATE;
      for await (const event of tts.synthesize({ text: phrase, language, voiceId: voice, sampleRate: FEATURE_SAMPLE_RATE })) {
        if (event.type === 'audio') {
          parts.push(event.pcm);
          rate = event.sampleRate;
        }
      }
      const pcm = concat(parts);
      return mfcc(trimSilence(rate === FEATURE_SAMPLE_RATE ? pcm : resample(pcm, rate, FEATURE_SAMPLE_RATE)));
    })();
    cached.catch(() => templateCache.delete(key));
    templateCache.set(key, cached);
  }
  return cached;
}
