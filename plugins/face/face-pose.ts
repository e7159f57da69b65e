/**
 * A face pose (what one frame should look like) and how it moves the rig's mesh points.
 * Poses are produced by the animator; `deformMesh` is pure geometry.
 */
import type { FaceRig } from './face-rig.ts';
import { upperTeethHeights } from './mouth-interior.ts';

export interface FacePose {
  /** Driven inner-lip gap as a fraction of the mouth width (0 = lips together). */
  jawOpen: number;
  /** 0: the reference's own mouth (rest); 1: the mouth fully driven by `jawOpen`. */
  speaking: number;
  /** -1 rounded (oo) .. 0 neutral .. +1 spread (ee). */
  mouthWidth: number;
  /** 0..1 lips pushed forward (rounded vowels, /w/): thicker lips, a rounder opening. */
  protrusion: number;
  /** 0..1 lower lip tucked under the upper teeth (f, v). */
  lipTuck: number;
  /**
   * 1: the reference's own expression (its smile); 0: a neutral mouth (corners lowered to the lip
   * line, the upper lip over more of the teeth). Relaxed while speaking (face-animator.ts).
   */
  expression: number;
  /** 0 open .. 1 closed. */
  blinkLeft: number;
  blinkRight: number;
  /** -1 lowered .. +1 raised. */
  browRaise: number;
  /** -1..1 of the eye's travel: right/down positive. */
  gazeX: number;
  gazeY: number;
  /** Head rotation in radians: turn (positive to the viewer's right), nod (positive down), tilt. */
  yaw: number;
  pitch: number;
  roll: number;
  /** Head translation as a fraction of the face height. */
  headX: number;
  headY: number;
  /** -1 exhaled .. +1 inhaled. */
  breath: number;
  /** -1..1 sideways sway of the shoulders. */
  shoulderSway: number;
}

export const REST_POSE: Readonly<FacePose> = {
  jawOpen: 0, speaking: 0, mouthWidth: 0, protrusion: 0, lipTuck: 0, expression: 1, blinkLeft: 0, blinkRight: 0, browRaise: 0, gazeX: 0, gazeY: 0,
  yaw: 0, pitch: 0, roll: 0, headX: 0, headY: 0, breath: 0, shoulderSway: 0,
};

/** Geometry gains, as fractions of the relevant face size. */
const GAINS = {
  /** Each corner's travel (fraction of the mouth width) at full spread and at full rounding. */
  mouthSpread: 0.11,
  mouthRound: 0.15,
  /** Inner corners travel further than the outer ones when rounding: the opening turns round. */
  innerRound: 1.2,
  /** Lip thickening (each lip, fraction of the mouth width) at full protrusion. */
  protrusionLip: 0.045,
  /** The lower lip rolls in (its visible height shrinks by this share) when tucked. */
  tuckRollIn: 0.3,
  /** Lower lip's gap to the upper lip when tucked, as a share of the upper teeth's height. */
  tuckGap: 0.72,
  /** A relaxed smile: the upper lip comes down over the teeth by up to this share of the reference gap... */
  relaxLipDropOfGap: 0.35,
  /** ...and of the smile's corner lift; the corners come in by this share of the lift. */
  relaxLipDropOfSmile: 0.6,
  relaxNarrowOfSmile: 0.5,
  browLift: 0.07,
  gazeTravelX: 0.12,
  gazeTravelY: 0.07,
  breathLift: 0.012,
  swayShift: 0.02,
  /** Share of a lip-gap change taken by the upper lip; the jaw and lower lip take the rest. */
  upperLipShare: 0.22,
} as const;

/** Writes the deformed mesh positions of `pose` into `out` (same layout as `rig.rest`). */
export function deformMesh(rig: FaceRig, pose: FacePose, out: Float32Array): void {
  out.set(rig.rest);
  const shiftY = (i: number, dy: number) => { out[2 * i + 1] = out[2 * i + 1]! + dy; };
  const shiftX = (i: number, dx: number) => { out[2 * i] = out[2 * i]! + dx; };

  deformMouth(rig, pose, out);

  blinkEye(rig, out, [37, 38], [41, 40], [40, 41], rig.lidFoldLeft, rig.eyeCentreLeft, pose.blinkLeft);
  blinkEye(rig, out, [43, 44], [47, 46], [46, 47], rig.lidFoldRight, rig.eyeCentreRight, pose.blinkRight);

  if (pose.gazeX !== 0 || pose.gazeY !== 0) {
    const gx = pose.gazeX * GAINS.gazeTravelX * rig.eyeWidth, gy = pose.gazeY * GAINS.gazeTravelY * rig.eyeWidth;
    // A closing lid hides the eye's travel (and must not be crossed by it).
    for (const [i, blink] of [[rig.eyeCentreLeft, pose.blinkLeft], [rig.eyeCentreRight, pose.blinkRight]] as const) {
      const open = 1 - Math.min(1, Math.max(0, blink));
      shiftX(i, gx * open); shiftY(i, gy * open);
    }
  }

  if (pose.browRaise !== 0) {
    const lift = -pose.browRaise * GAINS.browLift * rig.faceHeight;
    for (let i = 17; i < 27; i++) shiftY(i, lift * (i === 17 || i === 26 ? 0.7 : 1));
    for (const i of [...rig.lidFoldLeft, ...rig.lidFoldRight]) shiftY(i, lift * 0.45);
    for (const i of rig.foreheadPoints) shiftY(i, lift * 0.3);
  }

  // Body: breathing lifts the shoulders (and the head a little); sway shifts them sideways.
  const breathY = -pose.breath * GAINS.breathLift * rig.faceHeight;
  const swayX = pose.shoulderSway * GAINS.swayShift * rig.faceHeight;
  for (let i = 0; i < rig.pointCount; i++) {
    const b = rig.bodyWeight[i]!;
    if (b > 0) { shiftY(i, breathY * b); shiftX(i, swayX * b); }
  }

  applyHeadPose(rig, pose, out, breathY * 0.5, swayX * 0.4);
}

/**
 * The mouth: per inner-lip pair, from the neutral gap toward the driven one (the jaw and the lower
 * lip take most of a change, the upper lip the rest); the lower lip tucked under the upper teeth;
 * the corners in (rounded, lips thickened) or out (spread); and the reference's smile relaxed
 * toward a neutral mouth by `1 - expression`. Every gap ends exactly at its target, so a closure
 * is a closure whatever the expression.
 */
function deformMouth(rig: FaceRig, pose: FacePose, out: Float32Array): void {
  const r = rig.rest, mw = rig.mouthWidth, cx = rig.mouthCentre.x;
  const relax = Math.min(1, Math.max(0, 1 - pose.expression));
  const smile = rig.smileLiftPx;
  const tuck = Math.min(1, Math.max(0, pose.lipTuck)) * pose.speaking;
  const teeth = tuck > 0 ? upperTeethHeights(rig) : rig.referenceGaps;
  const profile = [0.82, 1, 0.82] as const;
  const up = GAINS.upperLipShare, lowerShare = 1 - up;
  const drop = [0, 0, 0], delta = [0, 0, 0];
  for (let k = 0; k < 3; k++) {
    // The relaxed smile's upper lip covers more of the teeth: the neutral gap is smaller.
    drop[k] = relax * Math.min(GAINS.relaxLipDropOfGap * rig.referenceGaps[k]!, GAINS.relaxLipDropOfSmile * smile);
    const driven = Math.max(0, pose.jawOpen) * mw * profile[k]!;
    const tucked = Math.max(0, GAINS.tuckGap * teeth[k]! - drop[k]!);
    const target = driven + (tucked - driven) * tuck;
    delta[k] = (target - (rig.referenceGaps[k]! - drop[k]!)) * pose.speaking;
  }
  const shiftY = (i: number, dy: number) => { out[2 * i + 1] = out[2 * i + 1]! + dy; };
  const shiftX = (i: number, dx: number) => { out[2 * i] = out[2 * i]! + dx; };
  const jawDrop = delta[1]! * lowerShare;
  for (let i = 0; i < rig.pointCount; i++) if (rig.jawWeight[i]! > 0) shiftY(i, jawDrop * rig.jawWeight[i]!);
  // The lower lip follows its own pair rather than the centre value.
  shiftY(67, (delta[0]! - delta[1]!) * lowerShare); shiftY(58, (delta[0]! - delta[1]!) * lowerShare);
  shiftY(65, (delta[2]! - delta[1]!) * lowerShare); shiftY(56, (delta[2]! - delta[1]!) * lowerShare);
  shiftY(61, drop[0]! - delta[0]! * up); shiftY(62, drop[1]! - delta[1]! * up); shiftY(63, drop[2]! - delta[2]! * up);
  shiftY(50, 0.8 * (drop[0]! - delta[0]! * up)); shiftY(51, 0.8 * (drop[1]! - delta[1]! * up)); shiftY(52, 0.8 * (drop[2]! - delta[2]! * up));
  shiftY(49, 0.45 * (drop[0]! - delta[0]! * up)); shiftY(53, 0.45 * (drop[2]! - delta[2]! * up));
  if (tuck > 0) {
    // The tucked lower lip rolls in: less of it shows.
    for (const [i, inner] of [[58, 67], [57, 66], [56, 65]] as const) shiftY(i, -tuck * GAINS.tuckRollIn * Math.max(0, r[2 * i + 1]! - r[2 * inner + 1]!));
  }

  // Corners: in when rounding, out when spreading; a relaxed smile lowers them to the lip line
  // (the lips follow by the square of their distance from the centre) and narrows the mouth.
  const spread = Math.max(0, pose.mouthWidth), round = Math.max(0, -pose.mouthWidth);
  const narrow = relax * GAINS.relaxNarrowOfSmile * smile * (1 - spread);
  const travel = ((spread * GAINS.mouthSpread - round * GAINS.mouthRound) * mw * pose.speaking) - narrow;
  // Relaxed corners end on the (relaxed) lip line: the upper lip came down by drop[1].
  const lower = relax * smile + (smile > 0 ? 0.5 * drop[1]! : 0);
  const protrude = Math.max(0, pose.protrusion) * pose.speaking * GAINS.protrusionLip * mw;
  for (let i = 48; i < 68; i++) {
    const u = Math.max(-1, Math.min(1, (r[2 * i]! - cx) / (mw / 2)));
    const inner = (i === 60 || i === 64) && travel < 0 ? GAINS.innerRound : 1;
    shiftX(i, travel * u * inner);
    shiftY(i, lower * u * u);
    if (protrude > 0) {
      const edge = 1 - 0.6 * u * u;
      if (i >= 49 && i <= 53) shiftY(i, -protrude * edge);
      else if (i >= 55 && i <= 59) shiftY(i, protrude * edge);
    }
  }
  for (const i of rig.cornerCheeks) {
    const u = Math.max(-1, Math.min(1, (r[2 * i]! - cx) / (mw / 2)));
    shiftX(i, 0.35 * travel * Math.sign(u));
    shiftY(i, 0.4 * lower);
  }
}

function blinkEye(
  rig: FaceRig, out: Float32Array, upper: readonly [number, number], lowerUnder: readonly [number, number],
  lower: readonly [number, number], folds: readonly number[], centre: number, amount: number,
): void {
  if (amount <= 0) return;
  const r = rig.rest;
  let gap = 0;
  for (let k = 0; k < 2; k++) {
    const u = upper[k]!, l = lowerUnder[k]!;
    const g = r[2 * l + 1]! - r[2 * u + 1]!;
    gap += g / 2;
    out[2 * u + 1] = out[2 * u + 1]! + amount * g * 0.9;
  }
  for (const l of lower) out[2 * l + 1] = out[2 * l + 1]! - amount * gap * 0.06;
  for (const f of folds) out[2 * f + 1] = out[2 * f + 1]! + amount * gap * 0.35;
  // The eye centre follows the lid down, staying above the (slightly rising) lower lid.
  out[2 * centre + 1] = out[2 * centre + 1]! + amount * gap * 0.42;
}

/** Orthographic head rotation with per-point depth (parallax), weighted per point. */
function applyHeadPose(rig: FaceRig, pose: FacePose, out: Float32Array, extraY: number, extraX: number): void {
  const { yaw, pitch, roll } = pose;
  const tx = pose.headX * rig.faceHeight + extraX;
  const ty = pose.headY * rig.faceHeight + extraY;
  if (yaw === 0 && pitch === 0 && roll === 0 && tx === 0 && ty === 0) return;
  const cx = rig.headCentre.x, cy = rig.headCentre.y;
  const px = rig.neckPivot.x, py = rig.neckPivot.y;
  const sy = Math.sin(yaw), cyw = Math.cos(yaw), sp = Math.sin(pitch), cp = Math.cos(pitch);
  const sr = Math.sin(roll), cr = Math.cos(roll);
  // Rotating about a centre behind the face surface also shifts the whole face.
  const zBack = 0.35 * rig.faceWidth;
  for (let i = 0; i < rig.pointCount; i++) {
    const w = rig.headWeight[i]!;
    if (w === 0) continue;
    const x0 = out[2 * i]!, y0 = out[2 * i + 1]!;
    const z = rig.depth[i]! + zBack * w;
    let x = cx + (x0 - cx) * cyw + z * sy;
    let y = cy + (y0 - cy) * cp + z * sp;
    const rx = x - px, ry = y - py;
    x = px + rx * cr - ry * sr + tx;
    y = py + rx * sr + ry * cr + ty;
    out[2 * i] = x0 + (x - x0) * w;
    out[2 * i + 1] = y0 + (y - y0) * w;
  }
}
