/**
 * Cartesia's timestamp messages -> our timings, and the gate that keeps audio back until the
 * timings of what it contains have arrived. Cartesia sends `timestamps` (words) and
 * `phoneme_timestamps` as generation goes, in seconds from the start of the context's audio,
 * usually after the chunks they describe; the face wants a phoneme with the audio it starts in,
 * and the TTS processor attaches words to the chunk they start in. So audio is released only up
 * to the end of the last timing received, but never more than `maxHoldMs` behind: timings that
 * come later than that ride on a later chunk (the processor places them back in time).
 */
import { concat } from '../../core/audio.ts';
import type { PhonemeTiming, WordTiming } from '../../core/frames.ts';

interface Spans {
  readonly start?: readonly number[];
  readonly end?: readonly number[];
}

const ms = (s: number) => Math.round(s * 1000);

export function wordTimings(w: (Spans & { readonly words?: readonly string[] }) | null | undefined): WordTiming[] {
  const words = w?.words ?? [];
  return words.flatMap((word, i) => {
    const start = w?.start?.[i];
    const end = w?.end?.[i];
    return typeof start === 'number' && typeof end === 'number' && word.trim() ? [{ word, startMs: ms(start), endMs: ms(Math.max(start, end)) }] : [];
  });
}

export function phonemeTimings(p: (Spans & { readonly phonemes?: readonly string[] }) | null | undefined): PhonemeTiming[] {
  const phonemes = p?.phonemes ?? [];
  return phonemes.flatMap((phoneme, i) => {
    const start = p?.start?.[i];
    const end = p?.end?.[i];
    return typeof start === 'number' && typeof end === 'number' ? [{ phoneme, startMs: ms(start), endMs: ms(Math.max(start, end)) }] : [];
  });
}

export type TimingKind = 'words' | 'phonemes';

export class TimingGate {
  private held: Int16Array[] = [];
  private heldSamples = 0;
  private releasedSamples = 0;
  /** How far each expected kind of timing has arrived (ms). */
  private readonly until: Map<TimingKind, number>;

  constructor(private readonly sampleRate: number, private readonly maxHoldMs: number, expected: readonly TimingKind[]) {
    this.until = new Map(expected.map((k) => [k, 0]));
  }

  /** Timings of `kind` up to `endMs` have arrived. */
  timedUntil(kind: TimingKind, endMs: number): void {
    if (this.until.has(kind)) this.until.set(kind, Math.max(this.until.get(kind)!, endMs));
  }

  /** Audio is timed as far as every expected kind has arrived. */
  private get timedUntilMs(): number {
    return this.until.size ? Math.min(...this.until.values()) : Infinity;
  }

  add(pcm: Int16Array): void {
    if (!pcm.length) return;
    this.held.push(pcm);
    this.heldSamples += pcm.length;
  }

  /** Audio now releasable (all of it with `all`), or undefined. */
  release(all = false): Int16Array | undefined {
    const total = this.releasedSamples + this.heldSamples;
    const timed = Number.isFinite(this.timedUntilMs) ? Math.floor((this.timedUntilMs * this.sampleRate) / 1000) : total;
    const forced = total - Math.floor((this.maxHoldMs * this.sampleRate) / 1000);
    const upTo = all ? total : Math.min(total, Math.max(timed, forced));
    const n = upTo - this.releasedSamples;
    if (n <= 0) return undefined;
    const every = this.held.length === 1 ? this.held[0]! : concat(this.held);
    const out = every.subarray(0, n);
    const rest = every.subarray(n);
    this.held = rest.length ? [rest] : [];
    this.heldSamples = rest.length;
    this.releasedSamples += n;
    return out;
  }
}
