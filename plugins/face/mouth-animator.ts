/**
 * The mouth's part of a pose, frame by frame: the opening, the lip shape (round, spread, tuck),
 * closures, and the expression that relaxes while speaking.
 *
 * - Opening. With phoneme timings, each sound's own opening (an "a" opens wider than an "i"),
 *   scaled by the speech's smoothed loudness (stress opens more). From audio alone, the loudness
 *   of the window with one window of look-ahead, as before, narrowed on rounded sounds.
 * - Closure. A frame the articulation closes is closed in that frame (no smoothing: a bilabial
 *   lasts 20-100 ms, and a smoothed closure never arrives); the release follows the next sound.
 * - Lip shape. Round, spread and tuck follow the articulation, which is already smooth in time
 *   (articulation.ts), with a light per-frame easing.
 * - Expression. A smiling photo relaxes toward a neutral mouth while speaking (to the configured
 *   `expression_strength` share of its smile) and returns to the photo's expression after
 *   `pauseMs` of silence (between sentences) and at rest, within half a second.
 */
import type { FaceOptions } from './configuration.ts';
import type { FacePose } from './face-pose.ts';
import type { Articulation } from './articulation.ts';
import type { SpeechWindow } from './face-animator.ts';

export const MOUTH_ANIMATION = {
  /** Widest driven inner-lip gap as a fraction of the mouth width. */
  maxJawOpen: 0.42,
  attack: 0.75,
  release: 0.5,
  /** A turn's mouth takes over from the photo's in two frames (a pop in one, a first syllable lost in three). */
  speakingRampPerFrame: 0.5,
  /** With phonemes: share of a sound's opening made at the softest / at full loudness. */
  quietOpen: 0.5,
  /** Per-frame easing of the lip shape toward the articulation's. */
  shapeEase: 0.75,
  /** Silence after which the mouth returns to the photo's (ms): a pause between sentences. */
  pauseMs: 200,
  /** Per-frame easing of the expression: relaxing into speech, and back in a pause. */
  relaxEase: 0.25,
  returnEase: 0.32,
  /** Per-frame easing of the mouth back to the photo's in a pause. */
  pauseReleasePerFrame: 0.25,
} as const;

/** An articulation and where it came from (phoneme timings win over the audio's estimate). */
export interface ArticulationInput extends Articulation {
  readonly fromPhonemes: boolean;
}

export class MouthAnimator {
  private level = 0;
  private silentMs = 0;

  constructor(private readonly options: FaceOptions) {}

  /**
   * Writes the mouth channels of `p` for the next 40 ms. `current`/`next`: this frame's window and
   * the following one (undefined when not speaking); `speaking`: a turn drives the mouth.
   */
  step(p: FacePose, current: SpeechWindow | undefined, next: SpeechWindow | undefined, speaking: boolean, fadeRate: number, art?: ArticulationInput): number {
    const A = MOUTH_ANIMATION, o = this.options;
    const level = current ? Math.max(current.level, 0.6 * (next?.level ?? 0)) : 0;
    this.level += (level - this.level) * (level > this.level ? 0.7 : 0.45);
    this.silentMs = level > 0.08 ? 0 : this.silentMs + 40;
    const pauseMs = art ? art.pauseMs : this.silentMs;
    // In a pause between sentences the mouth returns to the photo's, as at rest.
    const talking = speaking && pauseMs < A.pauseMs;

    const closure = art ? art.closure : 0;
    let target = 0;
    if (talking) {
      if (art?.fromPhonemes) target = art.open * (A.quietOpen + (1 - A.quietOpen) * this.level) * A.maxJawOpen * o.mouthScale;
      else {
        const fricative = current ? current.brightness * current.level : 0;
        // The loudness, lightly smoothed (raw, it zigzags with the syllables' amplitude ripple).
        const loud = 0.5 * (level + this.level);
        target = loud * A.maxJawOpen * o.mouthScale * (1 - 0.5 * fricative) * (1 - 0.35 * (art?.round ?? 0)) * (1 - 0.6 * (art?.tuck ?? 0));
      }
      target *= 1 - closure;
    }
    const k = closure >= 0.5 ? 1 : target > p.jawOpen ? A.attack : A.release;
    p.jawOpen += (target - p.jawOpen) * k;

    const shape = art ? art.spread - art.round : current ? (current.brightness - 0.35) * 1.2 : 0;
    p.mouthWidth += ((talking ? shape : 0) - p.mouthWidth) * A.shapeEase;
    p.protrusion += ((talking && art ? art.round : 0) - p.protrusion) * A.shapeEase;
    p.lipTuck += ((talking && art ? art.tuck : 0) - p.lipTuck) * A.shapeEase;

    // A closure is a closure from the first frame of a turn: the mouth is fully driven at once.
    if (talking && closure >= 0.5) p.speaking = 1;
    else if (talking) p.speaking = Math.min(1, p.speaking + A.speakingRampPerFrame);
    else p.speaking = Math.max(0, p.speaking - (speaking ? A.pauseReleasePerFrame : fadeRate));

    const expression = talking ? o.expressionStrength : 1;
    p.expression += (expression - p.expression) * (expression < p.expression ? A.relaxEase : A.returnEase);
    return level;
  }
}
