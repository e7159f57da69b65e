/**
 * A face that listens (issue #28): while the visitor speaks, the face does not idle as if alone.
 * From the visitor's voice, 40 ms at a time, it finds what listeners respond to:
 *
 * - accents: a syllable well above the visitor's running loudness, or a pitch rise of more than
 *   12% over their running median pitch (a stressed word, a question's rise): a small nod and a
 *   brief lift of the brows;
 * - phrase ends: a pause of 350 ms or more after 700 ms of speech: a slower, deeper nod (the
 *   listener's "mm-hm" without a sound);
 * - attention throughout: the head leans in a little and tilts to one side, the gaze stays on the
 *   visitor (no glances away, no posture shifts; presence-body and the portrait's gaze honour
 *   `attending`).
 *
 * human-presence responds fully; human-portrait, whose idle motion is gentle, at about half the
 * amplitude. Everything scales with `motion_scale` (and `expressiveness` on presence).
 */
import type { FaceOptions } from './configuration.ts';
import type { FacePose } from './face-pose.ts';

export const LISTENING = {
  /** Visitor audio counts as speech above this window loudness (0..1, see analyseWindow). */
  speechLevel: 0.2,
  /** An accent: this far above the running loudness (0..1 scale) and loud. */
  accentAbove: 0.16,
  accentLevel: 0.35,
  /** An accent from pitch: this share above the running median pitch. */
  pitchRise: 0.12,
  /** No two accent nods closer than this (ms). */
  accentGapMs: 450,
  /** A phrase end: a pause this long after this much speech (ms). */
  phraseEndPauseMs: 350,
  phraseMinSpeechMs: 700,
  /** Nod kicks (rad/frame of velocity) on presence; the portrait takes `portraitShare` of all motion. */
  accentNod: 0.012,
  phraseNod: 0.02,
  portraitShare: 0.5,
  /** Held while listening (rad): lean in (nod down a little), tilt to a side. */
  lean: 0.02,
  tilt: 0.035,
  /** Brow lift on an accent (0..1). */
  brow: 0.35,
  /** Attention eases in and out at this rate per frame. */
  attentionEase: 0.12,
} as const;

/** The visitor's voice during one frame. */
export interface VisitorWindow {
  /** 0..1 loudness (analyseWindow's scale). */
  readonly level: number;
  /** Fundamental frequency (Hz), 0 when unvoiced. */
  readonly pitchHz: number;
}

/** Fundamental frequency of 16 kHz audio (normalised autocorrelation at 8 kHz, 80-400 Hz), 0 when unvoiced. */
export function pitchOf(pcm: Int16Array): number {
  const n = pcm.length >> 1;
  if (n < 200) return 0;
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = (pcm[2 * i]! + pcm[2 * i + 1]!) / 65536;
  let energy = 0;
  for (let i = 0; i < n; i++) energy += x[i]! * x[i]!;
  if (energy < 1e-4) return 0;
  let best = 0, bestLag = 0;
  for (let lag = 20; lag <= 100; lag++) {
    let s = 0, e1 = 0, e2 = 0;
    for (let i = 0; i + lag < n; i++) { s += x[i]! * x[i + lag]!; e1 += x[i]! * x[i]!; e2 += x[i + lag]! * x[i + lag]!; }
    const r = s / Math.sqrt(e1 * e2 + 1e-12);
    if (r > best) { best = r; bestLag = lag; }
  }
  return best >= 0.5 ? 8000 / bestLag : 0;
}

export class ListeningBehaviour {
  private attention = 0;
  private levelMean = 0;
  private pitches: number[] = [];
  private speechMs = 0;
  private pauseMs = 0;
  private lastAccentMs = -1e9;
  private nod = 0;
  private nodVelocity = 0;
  private brow = 0;
  private side = 1;
  private timeMs = 0;

  constructor(private readonly options: FaceOptions, private readonly presence: boolean, random: () => number) {
    this.side = random() < 0.5 ? -1 : 1;
  }

  /** Whether the face is attending to a visitor (their voice heard recently). */
  get attending(): boolean {
    return this.attention > 0.05;
  }

  /**
   * Advances 40 ms and adds the listening motion to `p` (after the idle motion is set).
   * `visitor`: their voice in this frame, undefined when they are not speaking.
   */
  apply(p: FacePose, visitor: VisitorWindow | undefined): void {
    const L = LISTENING, o = this.options;
    this.timeMs += 40;
    const share = (this.presence ? 1 : L.portraitShare) * o.motionScale * (this.presence ? 0.5 + 0.5 * o.expressiveness : 1);
    this.attention += ((visitor ? 1 : 0) - this.attention) * L.attentionEase;
    if (visitor) {
      const speaking = visitor.level >= L.speechLevel;
      // Accents: loudness above the running mean, or a pitch rise over the running median.
      let accent = speaking && visitor.level > this.levelMean + L.accentAbove && visitor.level > L.accentLevel;
      if (visitor.pitchHz > 0) {
        const sorted = [...this.pitches].sort((a, b) => a - b);
        const median = sorted[sorted.length >> 1];
        if (median !== undefined && this.pitches.length >= 8 && visitor.pitchHz > median * (1 + L.pitchRise)) accent = true;
        this.pitches.push(visitor.pitchHz);
        if (this.pitches.length > 60) this.pitches.shift();
      }
      this.levelMean += (visitor.level - this.levelMean) * 0.08;
      if (accent && this.timeMs - this.lastAccentMs >= L.accentGapMs) {
        this.lastAccentMs = this.timeMs;
        this.nodVelocity += L.accentNod * share;
        this.brow = Math.max(this.brow, L.brow * share);
      }
      // Phrase ends: a pause after enough speech gets a deeper, slower nod.
      if (speaking) { this.speechMs += 40; this.pauseMs = 0; }
      else {
        this.pauseMs += 40;
        if (this.pauseMs >= L.phraseEndPauseMs && this.speechMs >= L.phraseMinSpeechMs) {
          this.nodVelocity += L.phraseNod * share;
          this.speechMs = 0;
        }
      }
    } else {
      this.speechMs = 0;
      this.pauseMs = 0;
    }
    this.nodVelocity += -0.2 * this.nod - 0.32 * this.nodVelocity;
    this.nod += this.nodVelocity;
    this.brow *= 0.85;
    const a = this.attention;
    if (a <= 0.001 && Math.abs(this.nod) < 1e-5) return;
    p.pitch += this.nod + a * L.lean * share;
    p.roll += a * this.side * L.tilt * share;
    p.browRaise += this.brow;
    // Eyes on the visitor.
    p.gazeX *= 1 - 0.7 * a;
    p.gazeY *= 1 - 0.7 * a;
  }
}
