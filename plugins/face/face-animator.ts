/**
 * Turns 40 ms windows of speech into poses: mouth opening from the loudness of the window
 * (with a one-window look-ahead so lips lead the sound slightly, as real lips do), mouth width
 * from the share of high-frequency energy, plus blinks, idle head motion and breathing. The
 * presence profile adds prosody-driven nods, brow raises on stressed syllables and gaze shifts.
 */
import type { FaceOptions } from './configuration.ts';
import { REST_POSE, type FacePose } from './face-pose.ts';
import type { VisemeHint } from './visemes.ts';

const ANIMATION = {
  /** Window loudness (dBFS) mapped to a closed mouth / fully open mouth. */
  silenceDb: -50,
  loudDb: -14,
  /** Widest driven inner-lip gap as a fraction of the mouth width. */
  maxJawOpen: 0.42,
  attack: 0.75,
  release: 0.5,
  speakingRampPerFrame: 0.34,
  blinkDurationMs: 200,
  minBlinkGapMs: 1400,
} as const;

/** Small deterministic PRNG (mulberry32): the same seed always moves the same way. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export interface SpeechWindow {
  /** 0..1 loudness of the window. */
  level: number;
  /** 0..1 share of energy in fast sign changes (fricatives spread the lips and close the jaw). */
  brightness: number;
}

export function analyseWindow(pcm: Int16Array | undefined): SpeechWindow {
  if (!pcm || pcm.length === 0) return { level: 0, brightness: 0 };
  let sum = 0, crossings = 0;
  for (let i = 0; i < pcm.length; i++) {
    const s = pcm[i]! / 32768;
    sum += s * s;
    if (i > 0 && (pcm[i]! >= 0) !== (pcm[i - 1]! >= 0)) crossings++;
  }
  const db = 10 * Math.log10(sum / pcm.length + 1e-12);
  const level = Math.min(1, Math.max(0, (db - ANIMATION.silenceDb) / (ANIMATION.loudDb - ANIMATION.silenceDb)));
  return { level, brightness: Math.min(1, crossings / pcm.length / 0.35) };
}

export class FaceAnimator {
  private readonly random: () => number;
  private readonly pose: FacePose = { ...REST_POSE };
  private timeMs = 0;
  private nextBlinkAtMs: number;
  private blinkStartMs = -1e9;
  private readonly phases: number[];
  private nod = 0;
  private nodVelocity = 0;
  private levelMean = 0;
  private gazeTargetX = 0;
  private gazeTargetY = 0;
  private nextGazeAtMs = 0;
  private readonly presence: boolean;

  constructor(private readonly options: FaceOptions, seed: number) {
    this.random = prng(seed);
    this.phases = Array.from({ length: 8 }, () => this.random() * Math.PI * 2);
    this.nextBlinkAtMs = 600 + this.random() * 2000;
    this.presence = options.variant === 'human-presence';
  }

  /**
   * Advances 40 ms. `current` is the window playing with this frame (undefined when not
   * speaking), `next` the following one when already known. `speaking` is whether a turn is
   * driving the mouth (false fades back to the reference mouth).
   */
  step(current: SpeechWindow | undefined, next: SpeechWindow | undefined, speaking: boolean, fadeRate: number = ANIMATION.speakingRampPerFrame, viseme?: VisemeHint): FacePose {
    const p = this.pose;
    const o = this.options;
    const t = (this.timeMs += 40) / 1000;

    const level = current ? Math.max(current.level, 0.6 * (next?.level ?? 0)) : 0;
    const fricative = current ? current.brightness * current.level : 0;
    const target = speaking && !viseme?.closed ? level * ANIMATION.maxJawOpen * o.mouthScale * (1 - 0.5 * fricative) : 0;
    const k = target > p.jawOpen || viseme?.closed ? ANIMATION.attack : ANIMATION.release;
    p.jawOpen += (target - p.jawOpen) * k;
    const width = viseme && viseme.width !== 0 ? viseme.width : (current ? current.brightness - 0.35 : 0) * 1.2;
    p.mouthWidth += ((speaking ? width : 0) - p.mouthWidth) * 0.5;
    p.speaking = speaking ? Math.min(1, p.speaking + ANIMATION.speakingRampPerFrame) : Math.max(0, p.speaking - fadeRate);

    // Blinks: a Poisson process with a refractory gap; close fast, open slower.
    if (o.blinkRatePerMinute > 0 && this.timeMs >= this.nextBlinkAtMs) {
      this.blinkStartMs = this.timeMs;
      const meanGap = 60_000 / o.blinkRatePerMinute;
      this.nextBlinkAtMs = this.timeMs + ANIMATION.minBlinkGapMs + -Math.log(1 - this.random()) * Math.max(0, meanGap - ANIMATION.minBlinkGapMs);
    }
    const bt = (this.timeMs - this.blinkStartMs) / ANIMATION.blinkDurationMs;
    const blink = bt < 0 || bt > 1 ? 0 : bt < 0.35 ? bt / 0.35 : 1 - (bt - 0.35) / 0.65;
    p.blinkLeft = p.blinkRight = blink;

    // Idle motion: incommensurate slow sines (never repeating, never still).
    const m = o.motionScale;
    const ph = this.phases;
    const sway = (f: number, i: number) => Math.sin(2 * Math.PI * f * t + ph[i]!);
    p.breath = sway(0.23, 0) * Math.max(0.35, o.breathingScale);
    p.shoulderSway = sway(0.07, 1) * 0.5 * o.breathingScale;
    const speakingMotion = p.speaking * (this.presence ? 1 + o.expressiveness : 0.6);
    p.yaw = m * (0.018 * sway(0.11, 2) + 0.01 * sway(0.29, 3) + 0.012 * speakingMotion * sway(0.37, 4));
    p.roll = m * (0.012 * sway(0.09, 5) + 0.006 * speakingMotion * sway(0.23, 6));
    p.headX = m * 0.006 * sway(0.05, 7);

    // Nods: a damped spring kicked by stressed syllables (a window much louder than the running mean).
    this.levelMean += ((current?.level ?? 0) - this.levelMean) * 0.08;
    const stressed = !!current && current.level > this.levelMean + 0.25 && current.level > 0.5;
    if (stressed && speaking) this.nodVelocity += (this.presence ? 0.012 * (0.5 + o.expressiveness) : 0.004) * m;
    this.nodVelocity += -0.25 * this.nod - 0.35 * this.nodVelocity;
    this.nod += this.nodVelocity;
    p.pitch = this.nod + m * 0.01 * sway(0.13, 1) + (speaking ? 0.01 * level * m : 0);
    p.headY = 0.002 * p.breath;

    if (this.presence) {
      const browTarget = stressed && speaking ? 0.6 * o.expressiveness : 0;
      p.browRaise += (browTarget - p.browRaise) * (browTarget > p.browRaise ? 0.6 : 0.15);
      if (this.timeMs >= this.nextGazeAtMs) {
        this.gazeTargetX = (this.random() - 0.5) * (speaking ? 0.9 : 0.5) * o.expressiveness;
        this.gazeTargetY = (this.random() - 0.5) * 0.3 * o.expressiveness;
        this.nextGazeAtMs = this.timeMs + 900 + this.random() * 2200;
      }
    } else {
      p.browRaise = 0.15 * p.speaking * level;
      if (this.timeMs >= this.nextGazeAtMs) {
        this.gazeTargetX = (this.random() - 0.5) * 0.25;
        this.gazeTargetY = (this.random() - 0.5) * 0.1;
        this.nextGazeAtMs = this.timeMs + 1500 + this.random() * 3000;
      }
    }
    p.gazeX += (this.gazeTargetX - p.gazeX) * 0.5;
    p.gazeY += (this.gazeTargetY - p.gazeY) * 0.5;
    return { ...p };
  }
}
