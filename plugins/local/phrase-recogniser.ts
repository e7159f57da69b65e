/**
 * Isolated-phrase recogniser: each phrase of a small list is synthesised once with the offline
 * TTS and kept as an MFCC template; an utterance is the phrase whose template it matches best by
 * dynamic time warping, when that match is close enough. It recognises what our own offline TTS
 * says (the end-to-end tests' "users") reliably; a human voice matches poorly (see the docs).
 *
 * Beginnings of phrases. A visitor who stops in the middle of a phrase ("What can you ...") is not
 * saying the phrase: matched against the whole phrases only, such a beginning was recognised as
 * the whole question often enough ("What can you" as "What can you do?" at distance 17-18, under the
 * threshold 22) to close the turn on its question mark, a cut-off. So the word beginnings of every
 * phrase of three or more words (two words and more: "What can", "What can you") are templates
 * too, and an utterance whose best beginning matches clearly better than its best whole phrase
 * (`PHRASE_RECOGNISER_DEFAULTS.prefixMargin`) is that beginning: a `partial` match. Measured on
 * espeak voices and speeds (docs/offline-engines.md): none of 48 recognised whole phrases read as
 * a beginning; 42 of 49 two-word-or-longer beginnings did (none was taken for a whole phrase).
 */
import { concat, resample } from '../../core/audio.ts';
import { sharedEspeakEngine, type EspeakEngine } from './espeak-engine.ts';
import { LocalTTSService } from './local-tts.ts';
import { dtwDistance, FEATURE_SAMPLE_RATE, mfcc, trimSilence } from './speech-features.ts';

export const PHRASE_RECOGNISER_DEFAULTS = {
  /** A beginning is recognised when its distance is under this share of the best whole phrase's. */
  prefixMargin: 0.8,
  /** Fewest words a beginning has to be a template (single words match too much of too little). */
  prefixMinWords: 2,
} as const;

export interface PhraseMatch {
  /** The phrase; for a partial match, the words of its beginning that were said (no punctuation). */
  readonly phrase: string;
  /** The utterance is the beginning of `phrase`'s phrase(s), not a whole one. */
  readonly partial: boolean;
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
  private readonly templates: Promise<Array<{ phrase: string; partial: boolean; features: Float32Array[] }>>;

  constructor(private readonly options: PhraseRecogniserOptions) {
    const tts = new LocalTTSService({ language: options.language, engine: options.engine ?? sharedEspeakEngine() });
    const voices = options.voices?.length ? options.voices : [undefined];
    const jobs = templateTexts(options.phrases).flatMap(({ phrase, partial }) => voices.map(async (voice) => ({ phrase, partial, features: await template(tts, phrase, options.language, voice) })));
    this.templates = Promise.all(jobs);
    // Failures surface on the first recognition; nothing may go unhandled meanwhile.
    this.templates.catch(() => undefined);
  }

  /** Resolves once every template is ready (or rejects with the synthesis error). */
  async ready(): Promise<void> {
    await this.templates;
  }

  /**
   * Best phrase for 16 kHz speech, or undefined when nothing is close enough. A beginning of a
   * phrase (`partial`) wins only when it matches clearly better than every whole phrase.
   */
  async recognise(pcm16k: Int16Array): Promise<PhraseMatch | undefined> {
    const templates = await this.templates;
    const features = mfcc(trimSilence(pcm16k));
    const best = { whole: undefined as { phrase: string; distance: number } | undefined, partial: undefined as { phrase: string; distance: number } | undefined };
    for (const { phrase, partial, features: reference } of templates) {
      const distance = dtwDistance(features, reference);
      const kind = partial ? 'partial' : 'whole';
      if (!best[kind] || distance < best[kind]!.distance) best[kind] = { phrase, distance };
    }
    const max = this.options.maxDistance;
    const match = (found: { phrase: string; distance: number }, partial: boolean): PhraseMatch => ({ phrase: found.phrase, partial, distance: found.distance, confidence: Math.max(0, 1 - found.distance / (2 * max)) });
    if (best.partial && best.partial.distance <= max && best.partial.distance < PHRASE_RECOGNISER_DEFAULTS.prefixMargin * (best.whole?.distance ?? Infinity)) return match(best.partial, true);
    return best.whole && best.whole.distance <= max ? match(best.whole, false) : undefined;
  }
}

/** What is synthesised as templates for a phrase list (in each template voice): the phrases, then their beginnings that are not phrases themselves. */
export function templateTexts(phrases: readonly string[]): Array<{ readonly phrase: string; readonly partial: boolean }> {
  const beginnings = [...new Set(phrases.flatMap((phrase) => phraseBeginnings(phrase)))].filter((words) => !phrases.some((phrase) => normalised(phrase) === normalised(words)));
  return [...phrases.map((phrase) => ({ phrase, partial: false })), ...beginnings.map((phrase) => ({ phrase, partial: true }))];
}

/** Lower-case words without punctuation: how phrases and beginnings are compared. */
export function normalised(text: string): string {
  return text
    .toLowerCase()
    .split(/\s+/)
    .map((w) => w.replace(/^[^\p{L}\p{N}']+|[^\p{L}\p{N}']+$/gu, ''))
    .filter(Boolean)
    .join(' ');
}

/** The word beginnings of a phrase that are templates: from `prefixMinWords` words to all but the last. */
export function phraseBeginnings(phrase: string): string[] {
  const words = phrase.trim().split(/\s+/).map((w) => w.replace(/[^\p{L}\p{N}']+$/gu, '')).filter(Boolean);
  const out: string[] = [];
  for (let n = PHRASE_RECOGNISER_DEFAULTS.prefixMinWords; n < words.length; n++) out.push(words.slice(0, n).join(' '));
  return out;
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
