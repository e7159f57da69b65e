/**
 * Turns espeak's event stream (word starts, phoneme starts, all in ms from the start of the
 * audio) into closed phoneme and word intervals, incrementally, so lip sync can start before the
 * sentence has finished synthesising.
 *
 * Guarantees (the avatar and the assistant context rely on them):
 * - phonemes partition [0, duration]: contiguous, non-overlapping, in order; silence is `_`;
 * - words are the text's whitespace-separated tokens, every one of them, punctuation included
 *   ("Hello!", "stand-in", "42"), so joining them with spaces gives the text back;
 * - a word spans from the start of its first phoneme to the end of its last voiced one; tokens
 *   espeak voices together (English "I am" is one espeak word) share that interval in proportion
 *   to their letters; words never overlap and lie inside the audio;
 * - stress marks (ˈ ˌ) are removed from phonemes: they carry no mouth shape.
 */
import type { PhonemeTiming, WordTiming } from '../../core/frames.ts';
import type { EspeakEvent } from './espeak-engine.ts';

export const SILENCE_PHONEME = '_';

interface Token {
  readonly text: string;
  /** Code-point span [start, end) in the original text. */
  readonly start: number;
  readonly end: number;
  /** espeak started a word inside this token. */
  voiced: boolean;
  startMs: number | undefined;
  endMs: number | undefined;
}

interface OpenPhoneme {
  readonly phoneme: string;
  readonly startMs: number;
  readonly token: Token | undefined;
}

export interface TimelineUpdate {
  readonly phonemes: PhonemeTiming[];
  readonly words: WordTiming[];
}

export class EspeakTimeline {
  private readonly tokens: Token[] = [];
  private open: OpenPhoneme = { phoneme: SILENCE_PHONEME, startMs: 0, token: undefined };
  private current = -1;
  private emitted = 0;
  private lastEndMs = 0;
  private closedPhonemes: PhonemeTiming[] = [];

  /**
   * @param text the original text (what WordTiming.word is cut from)
   * @param originalIndex code-point map from the text espeak saw to `text` (see escapeForEspeak)
   */
  constructor(text: string, private readonly originalIndex: readonly number[]) {
    let index = 0;
    for (const match of text.matchAll(/\S+/gu)) {
      const start = [...text.slice(0, match.index)].length;
      index = start + [...match[0]].length;
      this.tokens.push({ text: match[0], start, end: index, voiced: false, startMs: undefined, endMs: undefined });
    }
  }

  /** Feeds the events of one chunk; returns the intervals that are now final. */
  push(events: readonly EspeakEvent[]): TimelineUpdate {
    for (const event of events) {
      if (event.type === 'word') this.startWord(event);
      else if (event.type === 'phoneme') this.startPhoneme(event);
    }
    return this.collect(false);
  }

  /**
   * Time before which every phoneme and word is final (and already returned): audio before this
   * point can be played without any timing that starts in it arriving late.
   */
  get settledMs(): number {
    const pending = this.tokens.slice(this.emitted).map((t) => t.startMs ?? Infinity);
    return Math.min(this.open.startMs, ...pending);
  }

  /** Closes everything at the end of the audio. */
  finish(durationMs: number): TimelineUpdate {
    this.closeOpen(Math.max(durationMs, this.open.startMs));
    this.open = { phoneme: SILENCE_PHONEME, startMs: Math.max(durationMs, this.open.startMs), token: undefined };
    return this.collect(true);
  }

  private startWord(event: EspeakEvent): void {
    const at = this.originalIndex[event.text_position - 1];
    if (at === undefined) return;
    // Events only move forward through the text.
    let i = Math.max(0, this.current);
    while (i < this.tokens.length && this.tokens[i]!.end <= at) i++;
    if (i >= this.tokens.length) return;
    this.tokens[i]!.voiced = true;
    this.current = i;
  }

  private startPhoneme(event: EspeakEvent): void {
    const raw = typeof event.id === 'string' ? event.id : '';
    if (raw.startsWith('(')) return; // language-switch markers such as "(en)"
    const phoneme = raw.replace(/[ˈˌ]/g, '') || SILENCE_PHONEME;
    const at = Math.max(event.audio_position, this.open.startMs);
    if (phoneme === SILENCE_PHONEME && this.open.phoneme === SILENCE_PHONEME) return;
    this.closeOpen(at);
    const token = phoneme === SILENCE_PHONEME ? undefined : this.tokens[this.current];
    if (token && token.startMs === undefined) token.startMs = at;
    this.open = { phoneme, startMs: at, token };
  }

  private closeOpen(atMs: number): void {
    const { phoneme, startMs, token } = this.open;
    if (atMs > startMs) this.closedPhonemes.push({ phoneme, startMs, endMs: atMs });
    if (token) token.endMs = atMs;
  }

  /**
   * Words go out by cluster: a voiced token and the unvoiced tokens after it (before the first
   * voiced token, the leading ones too). A cluster is final once a later token is voiced and no
   * open phoneme still belongs to it, or at the end.
   */
  private collect(final: boolean): TimelineUpdate {
    const phonemes = this.closedPhonemes;
    this.closedPhonemes = [];
    const words: WordTiming[] = [];
    for (;;) {
      const voiced = this.nextVoiced(this.emitted);
      if (voiced < 0) {
        if (final) words.push(...this.spread(this.tokens.length - 1, undefined));
        break;
      }
      const next = this.nextVoiced(voiced + 1);
      if (!final && (next < 0 || this.open.token === this.tokens[voiced])) break;
      words.push(...this.spread(next < 0 ? this.tokens.length - 1 : next - 1, this.tokens[voiced]));
    }
    return { phonemes, words };
  }

  private nextVoiced(from: number): number {
    for (let i = from; i < this.tokens.length; i++) if (this.tokens[i]!.voiced) return i;
    return -1;
  }

  /** Emits tokens [emitted, last] over the interval of `timed` (split by letters). */
  private spread(last: number, timed: Token | undefined): WordTiming[] {
    const cluster = this.tokens.slice(this.emitted, last + 1);
    this.emitted = last + 1;
    if (cluster.length === 0) return [];
    // A token espeak gave no phoneme gets an empty interval where it stands.
    const startMs = timed?.startMs ?? this.lastEndMs;
    const endMs = timed?.endMs ?? startMs;
    const letters = cluster.map((t) => Math.max(1, (t.text.match(/[\p{L}\p{N}]/gu) ?? []).length));
    const total = letters.reduce((a, b) => a + b, 0);
    let at = startMs;
    const words = cluster.map((t, i) => {
      const to = i === cluster.length - 1 ? endMs : at + ((endMs - startMs) * letters[i]!) / total;
      const word = { word: t.text, startMs: at, endMs: to };
      at = to;
      return word;
    });
    this.lastEndMs = endMs;
    return words;
  }
}
