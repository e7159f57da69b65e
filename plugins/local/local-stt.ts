/**
 * `stt:local`: an offline STAND-IN for speech-to-text, not a speech recogniser. Open-vocabulary
 * offline ASR needs models this project cannot ship, so this engine:
 *
 * - cuts the incoming audio into utterances (WebRTC VAD, or the pipeline's `finalize()`);
 * - matches each utterance against a short list of phrases (templates made with the offline
 *   TTS, compared by DTW over MFCCs) and transcribes the best one when it is close enough;
 * - otherwise transcribes `[unrecognised speech]`, so the turn still happens and the responder
 *   can say it did not understand (or drops it, with `unrecognised: 'ignore'`).
 *
 * It recognises what the offline TTS says, which is what end-to-end tests feed it; a human voice
 * rarely matches. Only final transcripts are produced (no interim hypotheses).
 *
 * The beginning of a phrase said on its own (a visitor who pauses mid-question) is transcribed as
 * its words and an ellipsis (`What can you…`: an open ending for the turn analyzer), and the next
 * utterance is recognised joined to it, transcribed as the words that follow (`do?`).
 */
import { concat } from '../../core/audio.ts';
import { abortError } from '../../core/clock.ts';
import type { STTService, STTStream, STTStreamOptions, TranscriptEvent } from '../../processors/services.ts';
import type { EspeakEngine } from './espeak-engine.ts';
import { LocalEngineError } from './local-engine-error.ts';
import { LocalTTSService } from './local-tts.ts';
import { normalised, PhraseRecogniser } from './phrase-recogniser.ts';
import { trimSilence } from './speech-features.ts';
import { UNRECOGNISED_SPEECH } from './unrecognised-speech.ts';
import { UtteranceCutter, UtteranceStream } from './utterance-cutter.ts';

/** Phrases recognised when none are configured; each one gets an answer from `llm:local`. */
export const DEFAULT_STT_PHRASES: Readonly<Record<string, readonly string[]>> = {
  en: ['Hello', 'How are you?', 'What is your name?', 'Who are you?', 'What can you do?', 'Tell me a joke', 'Thank you', 'Goodbye', 'Hang up'],
  fr: ['Bonjour', 'Comment allez-vous ?', 'Comment vous appelez-vous ?', 'Que pouvez-vous faire ?', 'Raconte-moi une blague', 'Merci', 'Au revoir'],
  de: ['Hallo', 'Wie geht es dir?', 'Wer bist du?', 'Was kannst du?', 'Erzähl mir einen Witz', 'Danke', 'Auf Wiedersehen'],
  es: ['Hola', '¿Cómo estás?', '¿Quién eres?', '¿Qué puedes hacer?', 'Cuéntame un chiste', 'Gracias', 'Adiós'],
};

export const LOCAL_STT_DEFAULTS = {
  /** Phrases to recognise; undefined = DEFAULT_STT_PHRASES of the stream's language (English when none). */
  phrases: undefined as readonly string[] | undefined,
  /** espeak voices for the templates; undefined = the language's voice. More voices, more matches. */
  templateVoices: undefined as readonly string[] | undefined,
  /** Largest DTW distance accepted as a match (same-voice copies score 3-11, other phrases 30+). */
  maxDistance: 22,
  /** Silence after speech that ends an utterance without `finalize()`. Longer than a pipeline VAD's stop time, so `finalize()` normally decides. */
  autoEndpointMs: 1000,
  /** Less speech than this in an utterance (a click, a cough) is ignored. */
  minSpeechMs: 150,
  /** An utterance is recognised when it gets this long even if speech goes on. */
  maxUtteranceMs: 15_000,
  /** Audio kept from before speech starts, so the first consonant is not cut. */
  preRollMs: 200,
  /** What to do with speech that matches no phrase. */
  unrecognised: 'placeholder' as 'placeholder' | 'ignore',
  /**
   * The beginning of a phrase ("What can you", transcribed `What can you…`) is kept this long (ms
   * of audio from its end to the next utterance's start) for the rest of it: the next utterance is
   * recognised joined to it, and transcribed as the words that follow ("do?"). Longer than the turn
   * processor's longest wait (TURN_DEFAULTS.incompleteMs, 2.5 s).
   */
  prefixHoldMs: 3000,
} as const;

export interface LocalSTTOptions {
  readonly phrases?: readonly string[];
  readonly templateVoices?: readonly string[];
  readonly maxDistance?: number;
  readonly autoEndpointMs?: number;
  readonly minSpeechMs?: number;
  readonly maxUtteranceMs?: number;
  readonly preRollMs?: number;
  readonly unrecognised?: 'placeholder' | 'ignore';
  readonly prefixHoldMs?: number;
  readonly engine?: EspeakEngine;
}

type Settings = Omit<typeof LOCAL_STT_DEFAULTS, 'unrecognised'> & { unrecognised: 'placeholder' | 'ignore'; engine?: EspeakEngine };

export class LocalPhraseSTT implements STTService {
  readonly name = 'local-phrase-stt';
  private readonly settings: Settings;
  private readonly recognisers = new Map<string, PhraseRecogniser>();

  constructor(options: LocalSTTOptions = {}) {
    // Options passed as undefined keep their defaults.
    const given = Object.fromEntries(Object.entries(options).filter(([, value]) => value !== undefined));
    this.settings = { ...LOCAL_STT_DEFAULTS, ...given } as Settings;
    if (this.settings.phrases && this.settings.phrases.some((p) => typeof p !== 'string' || !p.trim())) {
      throw new LocalEngineError('invalid_options', 'phrases must be non-empty strings');
    }
    if (!(this.settings.maxDistance > 0)) throw new LocalEngineError('invalid_options', 'maxDistance must be positive');
    if (!(this.settings.prefixHoldMs >= 0)) throw new LocalEngineError('invalid_options', 'prefixHoldMs must be 0 or more');
  }

  /** The recogniser for a language (templates are built once, in the background). */
  recogniserFor(language: string): PhraseRecogniser {
    const base = language.toLowerCase().split('-')[0]!;
    const phrases = this.settings.phrases ?? DEFAULT_STT_PHRASES[base] ?? DEFAULT_STT_PHRASES.en!;
    let recogniser = this.recognisers.get(language);
    if (!recogniser) {
      recogniser = new PhraseRecogniser({
        phrases,
        language: DEFAULT_STT_PHRASES[base] || this.settings.phrases ? language : 'en',
        voices: this.settings.templateVoices,
        maxDistance: this.settings.maxDistance,
        engine: this.settings.engine,
      });
      this.recognisers.set(language, recogniser);
      // Templates that failed (engine crash) are made again by the next connection.
      recogniser.ready().catch(() => this.recognisers.delete(language));
    }
    return recogniser;
  }

  async connect(options: STTStreamOptions, signal?: AbortSignal): Promise<STTStream> {
    if (signal?.aborted) throw abortError(signal.reason);
    if (options.channels !== 1) throw new LocalEngineError('invalid_options', `the offline STT takes mono audio, got ${options.channels} channels`);
    if (!Number.isInteger(options.sampleRate) || options.sampleRate < 8000) {
      throw new LocalEngineError('unsupported_sample_rate', `sampleRate must be an integer of at least 8000 Hz, got ${options.sampleRate}`);
    }
    // Fail at connect, not at the first utterance, when the templates' voice does not exist.
    if (this.settings.phrases && !this.settings.templateVoices) {
      await new LocalTTSService({ engine: this.settings.engine }).voiceFor({ language: options.language });
    }
    return new PhraseSTTStream(this.recogniserFor(options.language), options, this.settings);
  }
}

class PhraseSTTStream extends UtteranceStream {
  protected readonly cutter: UtteranceCutter;
  private recognitions: Promise<void> = Promise.resolve();
  /** The beginning of a phrase last recognised, waiting for the rest (its trimmed audio, its words, its end). */
  private held: { pcm: Int16Array; words: string; endMs: number } | undefined;

  constructor(
    private readonly recogniser: PhraseRecogniser,
    private readonly options: STTStreamOptions,
    private readonly settings: Settings,
  ) {
    super();
    this.cutter = new UtteranceCutter(options.sampleRate, settings, { endpoint: () => this.endUtterance() });
  }

  protected pendingOut(): Promise<void> {
    return this.recognitions;
  }

  protected endUtterance(): void {
    const { pcm, speechMs, startMs, endMs } = this.cutter.take();
    if (speechMs < this.settings.minSpeechMs) return;
    // Recognitions finish in order, so transcripts keep the order of the utterances.
    this.recognitions = this.recognitions.then(() => this.recognise(pcm, startMs, endMs));
  }

  private async recognise(pcm: Int16Array, startMs: number, endMs: number): Promise<void> {
    try {
      const emit = (text: string, confidence: number) =>
        this.subject.next({ text, final: true, endOfUtterance: true, language: this.options.language, confidence, startMs, endMs });
      const held = this.held && startMs - this.held.endMs <= this.settings.prefixHoldMs ? this.held : undefined;
      this.held = undefined;
      if (held) {
        // The rest of a phrase begun in the last utterance?
        const joined = concat([held.pcm, trimSilence(pcm)]);
        const match = await this.recogniser.recognise(joined);
        const rest = match ? wordsAfter(match.phrase, held.words) : undefined;
        if (match && rest) {
          if (match.partial) this.held = { pcm: joined, words: match.phrase, endMs };
          return emit(match.partial ? `${rest}…` : rest, match.confidence);
        }
      }
      const match = await this.recogniser.recognise(pcm);
      if (!match && this.settings.unrecognised === 'ignore') return;
      if (match?.partial) this.held = { pcm: trimSilence(pcm), words: match.phrase, endMs };
      emit(match ? (match.partial ? `${match.phrase}…` : match.phrase) : UNRECOGNISED_SPEECH, match?.confidence ?? 0);
    } catch (err) {
      // The templates could not be made (e.g. no voice for the language): the stream is unusable.
      this.closed = true;
      this.subject.error(err);
    }
  }
}

/**
 * The words of `phrase` after its beginning `words` (as `phrase` writes them, punctuation kept), or
 * undefined when `phrase` does not begin with them or has nothing after them.
 */
export function wordsAfter(phrase: string, words: string): string | undefined {
  const tokens = phrase.trim().split(/\s+/);
  const begun = normalised(words).split(' ');
  let at = 0;
  const seen: string[] = [];
  while (at < tokens.length && seen.length < begun.length) {
    const word = normalised(tokens[at]!);
    at++;
    if (word) seen.push(word);
  }
  if (seen.join(' ') !== begun.join(' ')) return undefined;
  const rest = tokens.slice(at).join(' ');
  return normalised(rest) ? rest : undefined;
}
