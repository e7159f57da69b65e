/**
 * Character alignment -> word timings. ElevenLabs times every character of the input text; the
 * pipeline wants words (the assistant context keeps only the words that were actually played).
 * A word can straddle two streamed chunks, so the aligner carries the unfinished word over.
 */
import type { WordTiming } from '../../core/frames.ts';
import type { TimedCharacter } from '../../processors/tts/letter-sounds.ts';

export interface CharacterAlignment {
  readonly characters: readonly string[];
  readonly character_start_times_seconds: readonly number[];
  readonly character_end_times_seconds: readonly number[];
}

export class WordAligner {
  private word = '';
  private startMs = 0;
  private endMs = 0;

  /**
   * Adds one chunk's characters; returns the words completed by it. `offsetMs` shifts times
   * that are relative to something other than the request's audio start (0 for the HTTP API).
   */
  push(alignment: CharacterAlignment, offsetMs = 0): WordTiming[] {
    const { characters: chars, character_start_times_seconds: starts, character_end_times_seconds: ends } = alignment;
    const n = Math.min(chars.length, starts.length, ends.length);
    const done: WordTiming[] = [];
    for (let i = 0; i < n; i++) {
      const char = chars[i]!;
      if (/^\s*$/.test(char)) {
        const w = this.take();
        if (w) done.push(w);
        continue;
      }
      if (!this.word) this.startMs = offsetMs + starts[i]! * 1000;
      this.word += char;
      this.endMs = offsetMs + ends[i]! * 1000;
    }
    return done;
  }

  /** Start (ms, unrounded) of the word still being spelled out, if any. */
  get pendingStartMs(): number | undefined {
    return this.word ? this.startMs : undefined;
  }

  /** The last word, which no following space will ever close. */
  flush(): WordTiming[] {
    const w = this.take();
    return w ? [w] : [];
  }

  private take(): WordTiming | undefined {
    if (!this.word) return undefined;
    const w = { word: this.word, startMs: Math.round(this.startMs), endMs: Math.round(this.endMs) };
    this.word = '';
    return w;
  }
}

/** One chunk's alignment as timed characters (ms from the request's audio start). */
export function timedCharacters(alignment: CharacterAlignment, offsetMs = 0): TimedCharacter[] {
  const { characters: chars, character_start_times_seconds: starts, character_end_times_seconds: ends } = alignment;
  const n = Math.min(chars.length, starts.length, ends.length);
  const out: TimedCharacter[] = [];
  for (let i = 0; i < n; i++) {
    const startMs = offsetMs + starts[i]! * 1000, endMs = offsetMs + ends[i]! * 1000;
    if (typeof chars[i] === 'string' && Number.isFinite(startMs) && Number.isFinite(endMs)) out.push({ char: chars[i]!, startMs, endMs: Math.max(startMs, endMs) });
  }
  return out;
}
