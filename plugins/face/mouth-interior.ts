/**
 * The inside of the mouth when it opens wider than in the reference photo. Stretching the
 * reference's few pixels of mouth interior would smear teeth into a white band, so instead the
 * upper teeth (the top of the reference interior) stay attached to the upper lip, the lower
 * teeth to the lower lip, and the gap between them becomes a shaded cavity with a tongue.
 * A reference with closed lips gets synthetic teeth.
 */
import type { FaceRig } from './face-rig.ts';

const MOUTH_SHADING = {
  cavity: [58, 20, 24],
  tongue: [150, 72, 74],
  teeth: [222, 214, 200],
  /** Share of the reference interior treated as upper teeth (the rest as lower teeth). */
  upperTeethShare: 0.62,
  /** Below this reference gap (px) the reference has no usable teeth: draw synthetic ones. */
  minReferenceGapPx: 2.5,
  /** Synthetic teeth heights as a fraction of the mouth width. */
  syntheticUpperTeeth: 0.1,
  syntheticLowerTeeth: 0.05,
} as const;

const UPPER = [60, 61, 62, 63, 64] as const;
const LOWER = [60, 67, 66, 65, 64] as const;

/** Locates x on a polyline (x-sorted) and returns [segment, fraction], or null outside it. */
function locate(p: Float32Array, idx: readonly number[], x: number): [number, number] | null {
  for (let s = 0; s < idx.length - 1; s++) {
    const x0 = p[2 * idx[s]!]!, x1 = p[2 * idx[s + 1]!]!;
    if (x >= Math.min(x0, x1) && x <= Math.max(x0, x1)) {
      return [s, x1 === x0 ? 0 : (x - x0) / (x1 - x0)];
    }
  }
  return null;
}

const at = (p: Float32Array, idx: readonly number[], s: number, f: number, axis: 0 | 1) =>
  p[2 * idx[s]! + axis]! + (p[2 * idx[s + 1]! + axis]! - p[2 * idx[s]! + axis]!) * f;

/** Paints the mouth interior into `out` where the warped mouth is open wider than the reference. */
export function paintMouthInterior(rig: FaceRig, moved: Float32Array, out: Uint8Array): void {
  const { width: W, height: H, base, rest } = rig;
  const xl = moved[2 * 60]!, xr = moved[2 * 64]!;
  const x0 = Math.max(0, Math.ceil(Math.min(xl, xr))), x1 = Math.min(W - 1, Math.floor(Math.max(xl, xr)));
  const span = Math.max(1, Math.abs(xr - xl));
  const mw = rig.mouthWidth;
  const S = MOUTH_SHADING;
  for (let x = x0; x <= x1; x++) {
    const xc = x + 0.5;
    const up = locate(moved, UPPER, xc), lo = locate(moved, LOWER, xc);
    if (!up || !lo) continue;
    const yu = at(moved, UPPER, up[0], up[1], 1), yl = at(moved, LOWER, lo[0], lo[1], 1);
    const gap = yl - yu;
    // The same place on the reference curves (by curve parameter, not by x).
    const rxu = at(rest, UPPER, up[0], up[1], 0), ryu = at(rest, UPPER, up[0], up[1], 1);
    const rxl = at(rest, LOWER, lo[0], lo[1], 0), ryl = at(rest, LOWER, lo[0], lo[1], 1);
    const refGap = Math.max(0, ryl - ryu);
    if (gap <= refGap + 0.25) continue;
    const t = (xc - Math.min(xl, xr)) / span;
    const sideShade = 0.45 + 0.55 * Math.sin(Math.PI * Math.min(1, Math.max(0, t)));
    const synthetic = refGap < S.minReferenceGapPx;
    const hu = synthetic ? Math.min(S.syntheticUpperTeeth * mw, gap * 0.3) : refGap * S.upperTeethShare;
    const hl = synthetic ? Math.min(S.syntheticLowerTeeth * mw, gap * 0.15) : refGap - hu;
    const cavity = gap - hu - hl;
    const yStart = Math.max(0, Math.ceil(yu - 0.5)), yEnd = Math.min(H - 1, Math.floor(yl - 0.5));
    for (let y = yStart; y <= yEnd; y++) {
      const yc = y + 0.5;
      const du = yc - yu, dl = yl - yc;
      let r: number, g: number, b: number;
      if (du < hu) {
        if (synthetic) {
          const k = sideShade * (0.8 + 0.2 * (du / Math.max(1, hu)));
          r = S.teeth[0] * k; g = S.teeth[1] * k; b = S.teeth[2] * k;
        } else {
          [r, g, b] = sample(base, W, H, rxu, ryu + du);
        }
        const lipShadow = 0.7 + 0.3 * Math.min(1, du / 2);
        r *= lipShadow; g *= lipShadow; b *= lipShadow;
      } else if (dl < hl) {
        if (synthetic) {
          const k = sideShade * 0.75;
          r = S.teeth[0] * k; g = S.teeth[1] * k; b = S.teeth[2] * k;
        } else {
          [r, g, b] = sample(base, W, H, rxl, ryl - dl);
        }
      } else {
        // Cavity: darkest in the middle and at the top; the tongue rises from the bottom.
        const s = cavity > 0 ? (du - hu) / cavity : 0.5;
        const tongueTop = 0.62 - 0.25 * Math.sin(Math.PI * t);
        const depthShade = sideShade * (0.55 + 0.45 * s);
        if (s > tongueTop && cavity > 0.1 * mw) {
          const k = depthShade * (0.55 + 0.45 * Math.min(1, (s - tongueTop) * 4));
          r = S.tongue[0] * k; g = S.tongue[1] * k; b = S.tongue[2] * k;
        } else {
          r = S.cavity[0] * depthShade; g = S.cavity[1] * depthShade; b = S.cavity[2] * depthShade;
        }
      }
      // Antialias against the lips: partial coverage within a pixel of either lip edge.
      const a = Math.min(1, du + 0.5, dl + 0.5, (gap - refGap) * 0.5);
      const o = (y * W + x) * 3;
      out[o] = out[o]! * (1 - a) + r * a;
      out[o + 1] = out[o + 1]! * (1 - a) + g * a;
      out[o + 2] = out[o + 2]! * (1 - a) + b * a;
    }
  }
}

function sample(img: Uint8Array, W: number, H: number, x: number, y: number): [number, number, number] {
  const u = Math.min(W - 1.001, Math.max(0, x - 0.5)), v = Math.min(H - 1.001, Math.max(0, y - 0.5));
  const ix = u | 0, iy = v | 0, fx = u - ix, fy = v - iy;
  const i00 = (iy * W + ix) * 3, i01 = i00 + W * 3;
  const w00 = (1 - fx) * (1 - fy), w10 = fx * (1 - fy), w01 = (1 - fx) * fy, w11 = fx * fy;
  return [
    img[i00]! * w00 + img[i00 + 3]! * w10 + img[i01]! * w01 + img[i01 + 3]! * w11,
    img[i00 + 1]! * w00 + img[i00 + 4]! * w10 + img[i01 + 1]! * w01 + img[i01 + 4]! * w11,
    img[i00 + 2]! * w00 + img[i00 + 5]! * w10 + img[i01 + 2]! * w01 + img[i01 + 5]! * w11,
  ];
}
