/**
 * Turns 40 ms windows of speech into poses: mouth opening from the loudness of the window
 * (with a one-window look-ahead so lips lead the sound slightly, as real lips do), mouth width
 * from the share of high-frequency energy, plus blinks, idle head motion and breathing. The
 * presence profile (`PresenceBody`) replaces the portrait's gentle sines with body language
 * driven by the prosody: head turns at phrase onsets, nods/tilts/brow raises on stressed
 * syllables, gaze aversion and return, breathing with pauses, shoulders that follow the head,
 * idle posture shifts and seeded noise that never repeats.
 */
import type { FaceOptions } from './configuration.ts';
import { REST_POSE, type FacePose } from './face-pose.ts';
import { ListeningBehaviour, type VisitorWindow } from './listening.ts';
import { MOUTH_ANIMATION, MouthAnimator, type ArticulationInput } from './mouth-animator.ts';

const ANIMATION = {
  /** Window loudness (dBFS) mapped to a closed mouth / fully open mouth. */
  silenceDb: -50,
  loudDb: -14,
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

/**
 * Smooth seeded value noise in -1..1: random knots every `periodS` seconds joined by a cosine
 * ease. The knots are drawn, not periodic, so nothing built on it ever repeats.
 */
class SmoothNoise {
  private first = 0;
  private readonly knots: number[] = [];
  constructor(private readonly random: () => number, private readonly periodS: number) {}
  at(t: number): number {
    const x = t / this.periodS, i = Math.floor(x), f = x - i;
    while (this.first + this.knots.length < i + 2) this.knots.push(this.random() * 2 - 1);
    if (i - this.first > 64) { this.knots.splice(0, i - this.first); this.first = i; }
    const a = this.knots[i - this.first]!, b = this.knots[i + 1 - this.first]!;
    return a + (b - a) * (0.5 - 0.5 * Math.cos(Math.PI * f));
  }
}

/** A damped spring driven toward a target (head turns and the torso settle, kicks overshoot a little). */
class Spring {
  value = 0;
  velocity = 0;
  constructor(private readonly stiffness: number, private readonly damping: number) {}
  step(target: number): number {
    this.velocity += (target - this.value) * this.stiffness - this.velocity * this.damping;
    this.value += this.velocity;
    return this.value;
  }
}

/**
 * The presence profile's body language (human-presence only). Everything is driven by the
 * speech's prosody as the animator sees it, 40 ms at a time: phrase onsets (speech after a pause
 * of 200 ms or more) turn the head to a new side and send the gaze away briefly, as speakers do
 * when they start a thought; stressed syllables (a window well above the running loudness)
 * nod, tilt, raise the brows and lift the shoulders; the loudness contour leans the head in;
 * breathing slows while speaking and quickens in pauses; the shoulders follow the head's turn.
 * Idle: posture shifts every 5-12 s, glances away and back, and layered seeded noise (never
 * periodic) on every channel.
 */
const PRESENCE = {
  /** Head turn at a phrase onset (rad): minimum plus a random share of the range. */
  onsetTurnMin: 0.035,
  onsetTurnRange: 0.055,
  /** Nod and tilt kicks per stressed syllable (rad/frame of velocity). */
  nodKick: 0.016,
  tiltKick: 0.009,
  /** Head lean (pitch) and turn following the loudness contour while speaking. */
  leanWithLevel: 0.025,
  /** Idle posture shift targets (rad, fraction of face height). */
  postureYaw: 0.05,
  postureRoll: 0.03,
  postureShift: 0.02,
  /** Seeded noise amplitudes on top (rad). */
  noiseYaw: 0.025,
  noisePitch: 0.015,
  noiseRoll: 0.012,
  /** Gaze aversion at a phrase onset, and how long until eye contact comes back (ms). */
  gazeAwayX: 0.55,
  gazeAwayMs: [500, 1300],
  /** A continuous phrase re-turns the head after this long (ms), on its next stressed syllable. */
  phraseMs: [2000, 4000],
  /** Head turn beat per stressed syllable, toward the current side (rad/frame of velocity). */
  turnBeat: 0.003,
  /** Shoulder sway following the head turn (follow-through) and the weight shifts. */
  swayFollow: 15,
  swayNoise: 0.6,
  breathRateHz: 0.26,
  /** Largest head rotations (rad) the warp renders without folding. */
  maxYaw: 0.17,
  maxPitch: 0.14,
  maxRoll: 0.12,
  speakingBreathRateHz: 0.2,
} as const;

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
  /** Presence state (its own random stream: blinks stay where the seed puts them). */
  private readonly body: PresenceBody | null;
  private readonly mouth: MouthAnimator;
  private readonly listening: ListeningBehaviour;

  constructor(private readonly options: FaceOptions, seed: number) {
    this.random = prng(seed);
    this.phases = Array.from({ length: 8 }, () => this.random() * Math.PI * 2);
    this.nextBlinkAtMs = 600 + this.random() * 2000;
    this.presence = options.variant === 'human-presence';
    this.body = this.presence ? new PresenceBody(options, (seed ^ 0x5bd1e995) >>> 0) : null;
    this.mouth = new MouthAnimator(options);
    this.listening = new ListeningBehaviour(options, this.presence, prng((seed ^ 0x27d4eb2f) >>> 0));
  }

  /**
   * Advances 40 ms. `current` is the window playing with this frame (undefined when not
   * speaking), `next` the following one when already known. `speaking` is whether a turn is
   * driving the mouth (false fades back to the reference mouth). `articulation`: the mouth
   * shape the sounds of this frame ask for (articulation.ts), when known. `visitor`: the
   * visitor's voice in this frame while they speak (the face listens, listening.ts).
   */
  step(
    current: SpeechWindow | undefined, next: SpeechWindow | undefined, speaking: boolean, fadeRate: number = MOUTH_ANIMATION.speakingRampPerFrame,
    articulation?: ArticulationInput, visitor?: VisitorWindow,
  ): FacePose {
    const p = this.pose;
    const o = this.options;
    const t = (this.timeMs += 40) / 1000;

    const level = this.mouth.step(p, current, next, speaking, fadeRate, articulation);

    // Blinks: a Poisson process with a refractory gap; close fast, open slower.
    if (o.blinkRatePerMinute > 0 && this.timeMs >= this.nextBlinkAtMs) {
      this.blinkStartMs = this.timeMs;
      const meanGap = 60_000 / o.blinkRatePerMinute;
      this.nextBlinkAtMs = this.timeMs + ANIMATION.minBlinkGapMs + -Math.log(1 - this.random()) * Math.max(0, meanGap - ANIMATION.minBlinkGapMs);
    }
    const bt = (this.timeMs - this.blinkStartMs) / ANIMATION.blinkDurationMs;
    const blink = bt < 0 || bt > 1 ? 0 : bt < 0.35 ? bt / 0.35 : 1 - (bt - 0.35) / 0.65;
    p.blinkLeft = p.blinkRight = blink;

    // Nods: a damped spring kicked by stressed syllables (a window much louder than the running mean).
    this.levelMean += ((current?.level ?? 0) - this.levelMean) * 0.08;
    const stressed = !!current && speaking && current.level > this.levelMean + 0.25 && current.level > 0.5;
    if (this.body) {
      this.body.step(p, t, this.timeMs, current, speaking, stressed, level, this.listening.attending);
      this.listening.apply(p, visitor);
      return { ...p };
    }

    // Idle motion: incommensurate slow sines (never repeating, never still).
    const m = o.motionScale;
    const ph = this.phases;
    const sway = (f: number, i: number) => Math.sin(2 * Math.PI * f * t + ph[i]!);
    p.breath = sway(0.23, 0) * Math.max(0.35, o.breathingScale);
    p.shoulderSway = sway(0.07, 1) * 0.5 * o.breathingScale;
    const speakingMotion = p.speaking * 0.6;
    p.yaw = m * (0.018 * sway(0.11, 2) + 0.01 * sway(0.29, 3) + 0.012 * speakingMotion * sway(0.37, 4));
    p.roll = m * (0.012 * sway(0.09, 5) + 0.006 * speakingMotion * sway(0.23, 6));
    p.headX = m * 0.006 * sway(0.05, 7);

    if (stressed) this.nodVelocity += 0.004 * m;
    this.nodVelocity += -0.25 * this.nod - 0.35 * this.nodVelocity;
    this.nod += this.nodVelocity;
    p.pitch = this.nod + m * 0.01 * sway(0.13, 1) + (speaking ? 0.01 * level * m : 0);
    p.headY = 0.002 * p.breath;

    p.browRaise = 0.15 * p.speaking * level;
    if (this.timeMs >= this.nextGazeAtMs) {
      this.gazeTargetX = (this.random() - 0.5) * 0.25;
      this.gazeTargetY = (this.random() - 0.5) * 0.1;
      this.nextGazeAtMs = this.timeMs + 1500 + this.random() * 3000;
    }
    p.gazeX += (this.gazeTargetX - p.gazeX) * 0.5;
    p.gazeY += (this.gazeTargetY - p.gazeY) * 0.5;
    this.listening.apply(p, visitor);
    return { ...p };
  }
}

/** The human-presence body language (see PRESENCE). */
class PresenceBody {
  private readonly random: () => number;
  private readonly noise: SmoothNoise[];
  private readonly yaw = new Spring(0.05, 0.38);
  private readonly roll = new Spring(0.05, 0.38);
  private readonly shiftX = new Spring(0.03, 0.3);
  private readonly lean = new Spring(0.08, 0.45);
  private readonly sway = new Spring(0.035, 0.28);
  private nod = 0;
  private nodVelocity = 0;
  private yawTarget = 0;
  private rollTarget = 0;
  private shiftTarget = 0;
  private nextPostureAtMs: number;
  private silentMs = 10_000;
  private side = 1;
  private breathPhase: number;
  private gazeX = 0;
  private gazeY = 0;
  private gazeBackAtMs = 0;
  private nextGlanceAtMs: number;
  private brow = 0;
  private shoulderLift = 0;
  private nextPhraseAtMs = 0;

  constructor(private readonly options: FaceOptions, seed: number) {
    this.random = prng(seed);
    // Two layers per channel, periods chosen incommensurate (seconds).
    this.noise = [2.3, 5.9, 1.7, 4.3, 3.1, 7.3, 2.9, 6.1].map((period) => new SmoothNoise(this.random, period));
    this.nextPostureAtMs = 3000 + this.random() * 5000;
    this.nextGlanceAtMs = 1500 + this.random() * 2500;
    this.breathPhase = this.random() * Math.PI * 2;
    this.side = this.random() < 0.5 ? -1 : 1;
  }

  /** `attending`: a visitor is speaking: no posture shifts or glances away from them. */
  step(p: FacePose, t: number, nowMs: number, current: SpeechWindow | undefined, speaking: boolean, stressed: boolean, level: number, attending = false): void {
    const o = this.options, P = PRESENCE;
    const m = o.motionScale, e = o.expressiveness, r = this.random, n = this.noise;

    // Phrase onset: speech after a pause, or a stressed syllable once a phrase has run 2-4 s
    // (a new intonation phrase). Turn the head to the other side, look away briefly.
    const voiced = speaking && (current?.level ?? 0) > 0.25;
    if ((voiced && this.silentMs >= 200) || (stressed && nowMs >= this.nextPhraseAtMs)) {
      this.nextPhraseAtMs = nowMs + P.phraseMs[0] + (P.phraseMs[1] - P.phraseMs[0]) * r();
      this.side = r() < 0.75 ? -this.side : this.side;
      this.yawTarget = this.side * (P.onsetTurnMin + P.onsetTurnRange * r()) * e;
      this.rollTarget = -this.side * 0.5 * P.postureRoll * r() * e;
      this.gazeX = this.side * P.gazeAwayX * (0.6 + 0.4 * r()) * e;
      this.gazeY = (r() - 0.6) * 0.35 * e;
      this.gazeBackAtMs = nowMs + P.gazeAwayMs[0] + (P.gazeAwayMs[1] - P.gazeAwayMs[0]) * r();
    }
    this.silentMs = voiced ? 0 : this.silentMs + 40;
    if (nowMs >= this.gazeBackAtMs && speaking) { this.gazeX *= 0.2; this.gazeY *= 0.2; this.gazeBackAtMs = Infinity; }

    // Stressed syllables: nod, tilt toward the turn, brows up, shoulders up a little.
    if (stressed) {
      this.nodVelocity += P.nodKick * (0.5 + e) * m;
      this.roll.velocity += this.side * P.tiltKick * e * m * (0.5 + r());
      this.yaw.velocity += this.side * P.turnBeat * e * (0.5 + r());
      this.brow = Math.max(this.brow, 0.75 * e);
      this.shoulderLift = Math.max(this.shoulderLift, 1.1 * e);
    }
    this.nodVelocity += -0.22 * this.nod - 0.3 * this.nodVelocity;
    this.nod += this.nodVelocity;

    // Idle: a posture shift every 5-12 s (weight to one side, head turned and tilted a little).
    if (!speaking && !attending && nowMs >= this.nextPostureAtMs) {
      this.yawTarget = (r() * 2 - 1) * P.postureYaw;
      this.rollTarget = (r() * 2 - 1) * P.postureRoll;
      this.shiftTarget = (r() * 2 - 1) * P.postureShift;
      this.nextPostureAtMs = nowMs + 5000 + r() * 7000;
    }
    // Idle glances: short looks away and back, between posture shifts.
    if (!speaking && !attending && nowMs >= this.nextGlanceAtMs) {
      this.gazeX = (r() - 0.5) * 0.8;
      this.gazeY = (r() - 0.5) * 0.3;
      this.gazeBackAtMs = nowMs + 400 + r() * 1200;
      this.nextGlanceAtMs = nowMs + 2000 + r() * 4000;
    }
    if (!speaking && nowMs >= this.gazeBackAtMs) { this.gazeX *= 0.15; this.gazeY *= 0.15; this.gazeBackAtMs = Infinity; }

    const speechDrive = p.speaking * level;
    const yaw = this.yaw.step(this.yawTarget + speechDrive * 0.3 * this.yawTarget);
    const roll = this.roll.step(this.rollTarget);
    const lean = this.lean.step(speechDrive * P.leanWithLevel * (0.5 + e));
    p.yaw = m * (yaw + P.noiseYaw * (n[0]!.at(t) + 0.5 * n[1]!.at(t)) + 0.008 * Math.sin(2 * Math.PI * 0.11 * t));
    p.pitch = this.nod + m * (lean + P.noisePitch * (n[2]!.at(t) + 0.5 * n[3]!.at(t)));
    p.roll = m * (roll + P.noiseRoll * n[4]!.at(t));
    p.headX = m * (this.shiftX.step(this.shiftTarget) + 0.006 * n[5]!.at(t));
    // A 2D warp of one photo holds up to about 10 degrees of turn: beyond it the nose and the
    // hair fold over the cheek and the background (whatever motion_scale asks for).
    p.yaw = Math.max(-P.maxYaw, Math.min(P.maxYaw, p.yaw));
    p.pitch = Math.max(-P.maxPitch, Math.min(P.maxPitch, p.pitch));
    p.roll = Math.max(-P.maxRoll, Math.min(P.maxRoll, p.roll));

    // Breathing: slower while speaking (long exhales), faster in the pauses, its rate and depth
    // wandering with seeded noise. The shoulders rise with it and with stressed syllables.
    this.breathPhase += 2 * Math.PI * (speaking ? P.speakingBreathRateHz : P.breathRateHz) * (1 + 0.15 * n[6]!.at(t)) * 0.04;
    this.shoulderLift *= 0.92;
    const breathScale = Math.max(0.35, o.breathingScale);
    p.breath = breathScale * (Math.sin(this.breathPhase) * (0.85 + 0.15 * n[7]!.at(t)) + 0.5 * this.shoulderLift);
    p.headY = 0.003 * p.breath;
    // Shoulders sway with the weight shifts and follow the head's turn (follow-through).
    const swayTarget = P.swayFollow * (yaw + 0.5 * this.shiftX.value) + P.swayNoise * n[1]!.at(t + 17);
    p.shoulderSway = o.breathingScale * Math.tanh(this.sway.step(swayTarget));

    this.brow *= 0.86;
    p.browRaise += (this.brow - p.browRaise) * (this.brow > p.browRaise ? 0.6 : 0.2);
    p.gazeX += (this.gazeX - p.gazeX) * 0.55;
    p.gazeY += (this.gazeY - p.gazeY) * 0.55;
  }
}
