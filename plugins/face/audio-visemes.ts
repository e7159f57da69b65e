/**
 * Mouth shapes from the audio alone, for speech that comes without phoneme timings (a
 * `/realtime` client sending raw audio, a TTS that reports none). Streaming: the turn's audio is
 * analysed in 10 ms hops as it is queued (audio-features.ts), each hop gets a viseme, and
 * articulation.ts blends them exactly as it blends phonemes. The face plays a turn some frames
 * after it was queued, so the analysis usually sees 100 ms or more past the frame it shapes.
 *
 * What the audio tells, and how (rules from phonetics, thresholds checked on eSpeak voices and
 * sentences other than the test corpus's):
 *
 * - Closure. A voice bar (a quiet murmur with everything below 350 Hz: the lips or tongue closed
 *   and the vocal folds still going, as in /b/), a nasal murmur with its second resonance near
 *   1 kHz (/m/; /n/ has it near 1.8 kHz and is left open), or a silence of 15-150 ms between
 *   sounds whose release is not a high-frequency burst (the closure of /p/; /t/ and /k/ release
 *   with energy above 2 kHz). A run must last 20 ms to close the lips.
 * - Rounding: a voiced, loud hop with low formants: F2 under about 1 kHz (o, ɔ, w, back u), or a
 *   close vowel (F1 under 350 Hz) with F2 under about 1.5 kHz (a fronted u).
 * - Spread: a close or mid vowel with F2 above about 1.9 kHz (i, ɪ, e).
 * - Frication: fast zero crossings with the energy above 2.2 kHz: strong (s, ʃ) keeps the teeth
 *   together; weak (f, v, θ) tucks the lower lip a little.
 * - Opening: the jaw still follows the loudness (face-animator.ts); a high F1 (open vowels)
 *   asks for more.
 */
import { FEATURE_HOP, hopFeatures, type HopFeatures } from './audio-features.ts';
import { dropSegmentsBefore } from './articulation.ts';
import { NEUTRAL_VISEME, SILENT_VISEME, type Viseme, type VisemeSegment } from './visemes.ts';

export const AUDIO_VISEMES = {
  /** Hop loudness below the running speech level by this much (dB) is silence. */
  silenceBelowDb: 40,
  /** Absolute floor (dBFS) of sound. */
  floorDb: -62,
  /** The speech level decays this much per hop (dB) after its peak. */
  levelDecayDb: 0.02,
  /** Closure silences: this long at least and at most (hops of 10 ms). */
  minClosureHops: 2,
  maxClosureHops: 15,
  /** Murmur runs close the lips from this many hops, when this far (dB) below the sounds around them. */
  minMurmurHops: 2,
  murmurBelowDb: 3,
} as const;

const HOP_MS = 10;
const sm = (e0: number, e1: number, x: number) => { const t = Math.min(1, Math.max(0, (x - e0) / (e1 - e0))); return t * t * (3 - 2 * t); };

type HopClass = 'silence' | 'murmur' | 'sound';

interface Hop {
  cls: HopClass;
  /** The hop read as a sound (what a murmur run too loud or short to be a closure shows). */
  viseme: Viseme;
  /** Share of energy above 2.2 kHz (burst spectra). */
  high: number;
  db: number;
}

/**
 * What `decide` still needs of hops `prune` dropped while the run at `decided` was open (its
 * context, the 5 hops before it, or hops of the run itself).
 */
interface DroppedRun {
  readonly cls: HopClass;
  /** The hop before the run is not a silence (or the run opens the turn). */
  readonly before: boolean;
  /** Loudest of the `MURMUR_CONTEXT_HOPS` hops before the run (dB). */
  readonly loudBefore: number;
  /** Loudest dropped hop of the run (dB; none dropped: -Infinity). */
  maxDb: number;
}

/** A murmur run is judged against the loudest sound this many hops before and after it. */
const MURMUR_CONTEXT_HOPS = 5;
/** Hops `prune` always keeps (the newest): a run that follows reads those before it. */
const KEEP_HOPS = MURMUR_CONTEXT_HOPS + 1;

/** A murmur too short to be a closure: the lips nearly together. */
const SHORT_MURMUR: Viseme = { ...NEUTRAL_VISEME, open: 0.15 };

const closedViseme = (dominance: number): Viseme => ({
  open: 0, closed: true, round: 0, spread: 0, tuck: 0, lipDominance: 0.3, jawDominance: dominance, silent: false,
});

export class AudioVisemeTracker {
  /**
   * The turn's audio from sample `audioBase` (earlier samples were pruned) to `length`, held in
   * `audio` from index `audioAt`. Every index and time outside is turn-relative.
   */
  private audio = new Int16Array(16_000);
  private audioAt = 0;
  private audioBase = 0;
  private length = 0;
  /** Classified hops from hop `hopBase` on (earlier ones were pruned). */
  private readonly hops: Hop[] = [];
  private hopBase = 0;
  private level = -120;
  private readonly features: HopFeatures = hopFeatures(new Int16Array(0), 0);
  /**
   * Segments decided so far (closures need the sound after a silence: decided later); after a
   * `prune`, those that end after its time, and the last sound before it.
   */
  private readonly out: VisemeSegment[] = [];
  private decided = 0;
  private dropped: DroppedRun | null = null;

  /** Appends the turn's next audio (16 kHz mono). */
  push(pcm: Int16Array): void {
    const held = this.length - this.audioBase;
    if (this.audioAt + held + pcm.length > this.audio.length) {
      if (held + pcm.length <= this.audio.length / 2) this.audio.copyWithin(0, this.audioAt, this.audioAt + held);
      else {
        const grown = new Int16Array(Math.max(this.audio.length * 2, held + pcm.length));
        grown.set(this.audio.subarray(this.audioAt, this.audioAt + held));
        this.audio = grown;
      }
      this.audioAt = 0;
    }
    this.audio.set(pcm, this.audioAt + held);
    this.length += pcm.length;
  }

  /** Milliseconds of audio analysed so far would reach (what `segments` can cover). */
  get coveredMs(): number {
    return (this.length / 16_000) * 1000;
  }

  /**
   * The viseme segments of the audio up to `untilMs` (10 ms each, from the turn's start, or from
   * the last sound before what `prune` forgot), analysed
   * as far as needed and no further: a TTS may queue seconds of a turn at once, and analysing
   * them all in one frame would make that frame late. A trailing silence stays a pause until the
   * sound after it says whether it was a closure. `ended`: no more audio will come (a trailing
   * silence at the end of the audio is a pause for good).
   */
  segments(untilMs: number, ended = false): readonly VisemeSegment[] {
    // Every hop whose window lies inside the audio (the last ones wait for more, unless ended).
    const available = ended ? Math.ceil(this.length / FEATURE_HOP) : Math.floor((this.length - 208) / FEATURE_HOP) + 1;
    const analysable = Math.min(available, Math.ceil(untilMs / HOP_MS));
    while (this.hopBase + this.hops.length < analysable) this.hops.push(this.classify(this.hopBase + this.hops.length));
    this.decide(ended && analysable === available);
    return this.out;
  }

  /**
   * Analyses the audio up to `untilMs` and decides what no hop still to come can change (a
   * murmur run once the hops after it that judge it are known): what `segments` would decide the
   * same later, with no more than it would have analysed then, as long as `untilMs` is at most
   * 10 ms before the start of the next frame `segments` is asked about (`segments(untilMs)` itself
   * decides with what it has: its runs' context may be short). Keeps the analysis, and so what
   * `prune` can drop, up with a turn played from phoneme timings.
   */
  settle(untilMs: number): void {
    const available = Math.floor((this.length - 208) / FEATURE_HOP) + 1;
    const analysable = Math.min(available, Math.floor(untilMs / HOP_MS));
    while (this.hopBase + this.hops.length < analysable) this.hops.push(this.classify(this.hopBase + this.hops.length));
    this.decide(false, true);
  }

  /**
   * Forgets what lies before `beforeMs` of the turn (a time that never decreases, more than
   * `ARTICULATION_REACH_BEHIND_MS` before any frame still to be shaped from `segments`): its
   * audio, its hops (what deciding an open run needs of them is kept as a summary) and its
   * segments (`dropSegmentsBefore`: the last sound stays). What `segments` returns afterwards
   * shapes those frames exactly as before. Returns how many entries left the front of the array
   * `segments` returns: a search hint into it moves back by as many.
   */
  prune(beforeMs: number): number {
    const count = this.hopBase + this.hops.length;
    const to = Math.min(Math.floor(beforeMs / HOP_MS), count - KEEP_HOPS);
    if (to > this.hopBase) {
      const start = this.decided, at = (h: number) => this.hops[h - this.hopBase]!;
      // Hops from `decided` on are one open run of silence or murmur (a sound is decided at once).
      if (!this.dropped && to > Math.max(0, start - MURMUR_CONTEXT_HOPS)) {
        let loudBefore = -Infinity;
        for (let h = Math.max(0, start - MURMUR_CONTEXT_HOPS); h < start; h++) loudBefore = Math.max(loudBefore, at(h).db);
        this.dropped = { cls: at(start).cls, before: start === 0 || at(start - 1).cls !== 'silence', loudBefore, maxDb: -Infinity };
      }
      if (this.dropped) for (let h = Math.max(this.hopBase, start); h < to; h++) this.dropped.maxDb = Math.max(this.dropped.maxDb, at(h).db);
      this.hops.splice(0, to - this.hopBase);
      this.hopBase = to;
    }
    // The next hop to classify reads from 48 samples before its own start.
    const from = Math.min(Math.floor((beforeMs / 1000) * 16_000), count * FEATURE_HOP - 48);
    if (from > this.audioBase) {
      this.audioAt += from - this.audioBase;
      this.audioBase = from;
      const held = this.length - from;
      if (this.audio.length > 65_536 && held * 4 <= this.audio.length) {
        // Shrink after a long stretch queued at once has played.
        const kept = new Int16Array(Math.max(16_000, held * 2));
        kept.set(this.audio.subarray(this.audioAt, this.audioAt + held));
        this.audio = kept;
        this.audioAt = 0;
      }
    }
    return dropSegmentsBefore(this.out, beforeMs);
  }

  private classify(h: number): Hop {
    const at = h * FEATURE_HOP - 48 - this.audioBase;
    const f = hopFeatures(this.audio.subarray(this.audioAt, this.audioAt + this.length - this.audioBase), at, this.features);
    const A = AUDIO_VISEMES;
    if (f.db > this.level) this.level = f.db;
    else this.level = Math.max(f.db, this.level - A.levelDecayDb);
    const rel = f.db - this.level;
    const [b0, b1, b2, b3, b4] = f.bands as unknown as [number, number, number, number, number];
    const high = b3 + b4;
    const db = f.db;
    if (f.db < A.floorDb || rel < -A.silenceBelowDb) return { cls: 'silence', viseme: SILENT_VISEME, high, db };
    // Frication: fast zero crossings, energy high up.
    if (f.zcr > 0.22 && high > 0.45) {
      const strong = rel > -20;
      return {
        cls: 'sound', high, db,
        viseme: strong
          ? { open: 0.1, closed: false, round: 0, spread: 0.4, tuck: 0, lipDominance: 0.35, jawDominance: 0.9, silent: false }
          : { open: 0.12, closed: false, round: 0, spread: 0, tuck: 0.6, lipDominance: 0.8, jawDominance: 0.9, silent: false },
      };
    }
    // Vowel-like: how sure we are that it is a vowel (voiced and loud).
    const vowel = sm(-24, -14, rel) * (1 - sm(0.15, 0.25, f.zcr));
    const round = vowel * Math.max(sm(1150, 900, f.f2) * (1 - sm(650, 760, f.f1)), (1 - sm(340, 420, f.f1)) * sm(1650, 1400, f.f2));
    const spread = vowel * sm(1750, 2000, f.f2) * (1 - sm(500, 620, f.f1));
    const open = 0.25 + 0.75 * vowel * sm(450, 800, f.f1);
    const viseme: Viseme = { open, closed: false, round, spread, tuck: 0, lipDominance: 0.2 + 0.8 * Math.max(round, spread), jawDominance: 0.4 + 0.6 * vowel, silent: false };
    // Murmur candidates: a voice bar (nothing above 1 kHz: lips or tongue closed, the vocal folds
    // still going, as in /b/) or /m/'s nasal murmur (its second resonance near 1 kHz; /n/'s is
    // near 1.8 kHz). Whether the run is quiet enough to be a closure is judged on the run.
    const bar = b0 >= 0.75 && b2 + high <= 0.05 && f.zcr < 0.09;
    const nasalM = b0 >= 0.7 && f.zcr < 0.12 && f.f2 >= 900 && f.f2 <= 1250 && high < 0.05 && b1 <= 0.16;
    return { cls: bar || nasalM ? 'murmur' : 'sound', viseme, high, db };
  }

  /**
   * Turns classified hops into segments; runs of silence and murmur are judged as wholes.
   * `settledOnly`: leaves a murmur run whose judging hops after it are not all classified.
   */
  private decide(ended: boolean, settledOnly = false): void {
    const A = AUDIO_VISEMES, base = this.hopBase, count = base + this.hops.length;
    const at = (h: number) => this.hops[h - base]!;
    while (this.decided < count) {
      // `held`: what was pruned of this run and its context (hops before `base` are gone).
      const start = this.decided, held = this.dropped, cls = held ? held.cls : at(start).cls;
      if (cls === 'sound') {
        this.emit(start, start + 1, at(start).viseme);
        continue;
      }
      let end = Math.max(start, base);
      while (end < count && at(end).cls === cls) end++;
      if (end === count && !ended) return; // the run may go on: decide when it ends
      if (settledOnly && cls === 'murmur' && end + MURMUR_CONTEXT_HOPS > count) return;
      this.dropped = null;
      const run = end - start;
      if (cls === 'murmur') {
        // A closure's murmur is well below the sounds around it (within 50 ms).
        let loud = held ? held.loudBefore : -Infinity, quiet = held ? held.maxDb : -Infinity;
        for (let h = Math.max(0, start - MURMUR_CONTEXT_HOPS, base); h < Math.min(count, end + MURMUR_CONTEXT_HOPS); h++) if (h < start || h >= end) loud = Math.max(loud, at(h).db);
        for (let h = Math.max(start, base); h < end; h++) quiet = Math.max(quiet, at(h).db);
        if (run >= A.minMurmurHops && quiet <= loud - A.murmurBelowDb) this.emit(start, end, closedViseme(1));
        else {
          // Pruned hops' segments would end before the prune's time, and the run's kept hops (at
          // least KEEP_HOPS: the run was open then) follow them as sounds: nothing reads them.
          if (start < base) this.decided = base;
          for (let h = Math.max(start, base); h < end; h++) this.emit(h, h + 1, run >= A.minMurmurHops ? at(h).viseme : SHORT_MURMUR);
        }
        continue;
      }
      // Silence: a stop's closure when short, between sounds, and released by a burst that is
      // not a high-frequency one (p, b rather than t, k).
      const before = held ? held.before : start === 0 || at(start - 1).cls !== 'silence'; // a turn may open on a stop
      const after = end < count ? at(end) : undefined;
      const burstLow = after !== undefined && after.cls !== 'silence' && after.high < 0.35;
      const closure = before && burstLow && run >= A.minClosureHops && run <= A.maxClosureHops;
      this.emit(start, end, closure ? closedViseme(1) : SILENT_VISEME);
    }
  }

  private emit(from: number, to: number, viseme: Viseme): void {
    this.out.push({ startMs: from * HOP_MS, endMs: to * HOP_MS, viseme });
    this.decided = to;
  }
}
