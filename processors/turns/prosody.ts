/**
 * The prosody of the end of an utterance: did the voice fall and fade (a statement or a
 * wh-question ending), or was it held or rising (a speaker who goes on)?
 *
 * From the last second or so of the user's audio: 10 ms frames at 8 kHz, the level of each, the
 * pitch of the voiced ones (normalised autocorrelation, 70-400 Hz), then over the last
 * `tailMs` of speech before the silence: the pitch of its final part against the part before
 * (semitones) and the level of its last 100 ms against the 200 ms before (dB). Costs about a
 * millisecond per call on this machine (measured in the turns bench).
 */
import { resample } from '../../core/audio.ts';
import { resolveOptions, type OptionsFor, type Resolved } from '../../core/options.ts';

export const PROSODY_DEFAULTS = {
  /** Speech before the silence that is read (ms). */
  tailMs: 500,
  /** The final part whose pitch is compared with the rest of the tail (ms of voiced frames). */
  finalMs: 150,
  /** A final pitch this far (semitones) under the rest of the tail is a fall. */
  fallSemitones: 1.5,
  /** A final pitch no lower than this (semitones, relative to the rest of the tail) was held level. */
  heldSemitones: -0.5,
  /** This far above is a rise. */
  riseSemitones: 1.5,
  /**
   * With too few voiced frames to read a pitch, a last 100 ms this much (dB) quieter than the 200 ms
   * before is a fade (a fall). Not used when the pitch can be read: synthetic and read speech fade
   * at the end of open phrases as much as of finished ones (measured on the turns corpus).
   */
  decayDb: 12,
  /** Fewer voiced frames than this in the tail: no pitch reading. */
  minVoicedFrames: 8,
  /** Frames quieter than the loudest by more than this (dB) are not read for pitch (breath, creak). */
  voicedWithinDb: 25,
  /** Autocorrelation peak needed for a frame to be voiced. */
  voicing: 0.45,
} as const;

export type ProsodyOptions = OptionsFor<typeof PROSODY_DEFAULTS>;

/** `fall`: pitch fell at the end (or it faded out): finished. `rise` / `held`: going on. `none`: cannot tell. */
export type ProsodyCue = 'fall' | 'rise' | 'held' | 'none';

export interface ProsodyReading {
  readonly cue: ProsodyCue;
  /** Final pitch minus the tail's earlier pitch (semitones); null without enough voiced frames. */
  readonly pitchChangeSt: number | null;
  /** Level of the tail's last 100 ms under the 200 ms before it (dB, positive = quieter). */
  readonly energyDropDb: number | null;
  /** Voiced speech read in the tail (ms). */
  readonly voicedMs: number;
}

const RATE = 8000;
const FRAME = 80; // 10 ms
const WINDOW = 256; // 32 ms autocorrelation window
const MIN_LAG = 20; // 400 Hz
const MAX_LAG = 114; // 70 Hz

export class ProsodyReader {
  private readonly settings: Resolved<typeof PROSODY_DEFAULTS>;

  constructor(options: ProsodyOptions = {}) {
    this.settings = resolveOptions(PROSODY_DEFAULTS, options);
  }

  read(audio: Int16Array, sampleRate: number): ProsodyReading {
    const s = this.settings;
    const pcm = this.to8k(audio, sampleRate);
    const frames = Math.floor(pcm.length / FRAME);
    const none: ProsodyReading = { cue: 'none', pitchChangeSt: null, energyDropDb: null, voicedMs: 0 };
    if (frames < 10) return none;
    const db = new Float64Array(frames);
    let peak = -Infinity;
    for (let f = 0; f < frames; f++) {
      let sum = 0;
      for (let i = f * FRAME; i < (f + 1) * FRAME; i++) sum += pcm[i]! * pcm[i]!;
      db[f] = 10 * Math.log10(sum / FRAME / (32768 * 32768) + 1e-12);
      peak = Math.max(peak, db[f]!);
    }
    // The end of speech: the last frame within 30 dB of the loudest (and not near digital silence).
    const floor = Math.max(peak - 30, -60);
    let end = frames - 1;
    while (end >= 0 && db[end]! < floor) end--;
    if (end < 10) return none;
    const tailFrames = Math.round(s.tailMs / 10);
    const start = Math.max(0, end - tailFrames + 1);
    const pitches: number[] = [];
    for (let f = start; f <= end; f++) {
      if (db[f]! < peak - s.voicedWithinDb) continue;
      const st = this.pitchSemitones(pcm, (f + 1) * FRAME);
      if (st !== null) pitches.push(st);
    }
    const level = (from: number, to: number) => {
      let sum = 0;
      let n = 0;
      for (let f = Math.max(0, from); f <= to; f++, n++) sum += db[f]!;
      return n ? sum / n : -Infinity;
    };
    const energyDropDb = level(end - 29, end - 10) - level(end - 9, end);
    const voicedMs = pitches.length * 10;
    if (pitches.length < s.minVoicedFrames) {
      return { cue: energyDropDb >= s.decayDb ? 'fall' : 'none', pitchChangeSt: null, energyDropDb, voicedMs };
    }
    // Frames read an octave off (a tracking error, not intonation) are folded back to within
    // half an octave of the tail's median.
    const reference = median(pitches);
    const folded = pitches.map((p) => p - 12 * Math.round((p - reference) / 12));
    const finalCount = Math.max(3, Math.min(Math.round(s.finalMs / 10), folded.length - 3));
    const pitchChangeSt = median(folded.slice(-finalCount)) - median(folded.slice(0, -finalCount));
    let cue: ProsodyCue = 'none';
    if (pitchChangeSt <= -s.fallSemitones) cue = 'fall';
    else if (pitchChangeSt >= s.riseSemitones) cue = 'rise';
    else if (pitchChangeSt >= s.heldSemitones) cue = 'held';
    return { cue, pitchChangeSt, energyDropDb, voicedMs };
  }

  /** Pitch of the window ending at `end` in semitones above 100 Hz, or null when unvoiced. */
  private pitchSemitones(pcm: Float32Array, end: number): number | null {
    const from = end - WINDOW;
    if (from < 0) return null;
    const n = WINDOW - MAX_LAG;
    const r = new Float64Array(MAX_LAG + 1);
    let best = 0;
    for (let lag = MIN_LAG; lag <= MAX_LAG; lag++) {
      let xy = 0;
      let xx = 0;
      let yy = 0;
      for (let i = from; i < from + n; i++) {
        const x = pcm[i]!;
        const y = pcm[i + lag]!;
        xy += x * y;
        xx += x * x;
        yy += y * y;
      }
      r[lag] = xy / Math.sqrt(xx * yy + 1e-9);
      best = Math.max(best, r[lag]!);
    }
    // The shortest lag at a local peak nearly as strong as the best: multiples of the period
    // correlate as well, and taking them would read the pitch an octave (or more) too low.
    let bestLag = 0;
    for (let lag = MIN_LAG + 1; lag < MAX_LAG; lag++) {
      if (r[lag]! >= 0.9 * best && r[lag]! >= r[lag - 1]! && r[lag]! >= r[lag + 1]!) {
        bestLag = lag;
        break;
      }
    }
    if (best < this.settings.voicing || bestLag === 0) return null;
    return 12 * Math.log2(RATE / bestLag / 100);
  }

  private to8k(audio: Int16Array, sampleRate: number): Float32Array {
    // The audio is a window, not a continuing stream: resampled whole.
    return Float32Array.from(sampleRate === RATE ? audio : resample(audio, sampleRate, RATE));
  }
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}
