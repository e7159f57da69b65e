/**
 * The lip contours as smooth curves, and sampling helpers, shared by the mouth interior
 * (mouth-interior.ts) and the closed-lip contact line (lip-contact.ts).
 */

export const UPPER = [60, 61, 62, 63, 64] as const;
export const LOWER = [60, 67, 66, 65, 64] as const;
/** The outer lip contour opposite each inner-lip landmark. */
export const UPPER_OUTER = [48, 50, 51, 52, 54] as const;
export const LOWER_OUTER = [48, 58, 57, 56, 54] as const;

export type Rgb = [number, number, number];

export const smoothstep = (e0: number, e1: number, x: number) => {
  const t = Math.min(1, Math.max(0, (x - e0) / (e1 - e0)));
  return t * t * (3 - 2 * t);
};
export const luma = (c: ArrayLike<number>) => 0.299 * c[0]! + 0.587 * c[1]! + 0.114 * c[2]!;

/**
 * A smooth curve y(x) through the inner-lip landmarks: cubic Hermite with finite-difference
 * slopes (C1, passes through every landmark). Writes y and dy/dx, and the segment and fraction
 * of x, into `out`; returns false outside the curve's x range.
 */
export const curveOut = { y: 0, slope: 0, seg: 0, frac: 0 };
export function curveAt(p: Float32Array, idx: readonly number[], x: number): boolean {
  const n = idx.length;
  let s = -1;
  for (let k = 0; k < n - 1; k++) {
    const xa = p[2 * idx[k]!]!, xb = p[2 * idx[k + 1]!]!;
    if (x >= xa && x <= xb && xb > xa) { s = k; break; }
  }
  if (s < 0) return false;
  const x0 = p[2 * idx[s]!]!, x1 = p[2 * idx[s + 1]!]!, y0 = p[2 * idx[s]! + 1]!, y1 = p[2 * idx[s + 1]! + 1]!;
  const h = x1 - x0, f = (x - x0) / h;
  const secant = (k: number) => {
    const xa = p[2 * idx[k]!]!, xb = p[2 * idx[k + 1]!]!;
    return (p[2 * idx[k + 1]! + 1]! - p[2 * idx[k]! + 1]!) / Math.max(1e-3, xb - xa);
  };
  const m0 = s === 0 ? secant(0) : (secant(s - 1) + secant(s)) / 2;
  const m1 = s === n - 2 ? secant(n - 2) : (secant(s) + secant(s + 1)) / 2;
  const f2 = f * f, f3 = f2 * f;
  curveOut.y = (2 * f3 - 3 * f2 + 1) * y0 + (f3 - 2 * f2 + f) * h * m0 + (-2 * f3 + 3 * f2) * y1 + (f3 - f2) * h * m1;
  curveOut.slope = ((6 * f2 - 6 * f) * y0 + (3 * f2 - 4 * f + 1) * h * m0 + (-6 * f2 + 6 * f) * y1 + (3 * f2 - 2 * f) * h * m1) / h;
  curveOut.seg = s;
  curveOut.frac = f;
  return true;
}

export const polylineY = (p: Float32Array, idx: readonly number[], seg: number, frac: number) =>
  p[2 * idx[seg]! + 1]! + (p[2 * idx[seg + 1]! + 1]! - p[2 * idx[seg]! + 1]!) * frac;
export const linearAt = (p: Float32Array, idx: readonly number[], seg: number, frac: number): [number, number] =>
  [p[2 * idx[seg]!]! + (p[2 * idx[seg + 1]!]! - p[2 * idx[seg]!]!) * frac, polylineY(p, idx, seg, frac)];

/** The reference point (x, y) at segment/fraction of a curve. */
export function refPoint(rest: Float32Array, idx: readonly number[], seg: number, frac: number): [number, number] {
  const x = rest[2 * idx[seg]!]! + (rest[2 * idx[seg + 1]!]! - rest[2 * idx[seg]!]!) * frac;
  return curveAt(rest, idx, x) ? [x, curveOut.y] : [x, rest[2 * idx[seg]! + 1]! + (rest[2 * idx[seg + 1]! + 1]! - rest[2 * idx[seg]! + 1]!) * frac];
}

export function sampleInto(img: Uint8Array, W: number, H: number, x: number, y: number, out: Rgb): Rgb {
  const u = Math.min(W - 1.001, Math.max(0, x - 0.5)), v = Math.min(H - 1.001, Math.max(0, y - 0.5));
  const ix = u | 0, iy = v | 0, fx = u - ix, fy = v - iy;
  const i00 = (iy * W + ix) * 3, i01 = i00 + W * 3;
  const w00 = (1 - fx) * (1 - fy), w10 = fx * (1 - fy), w01 = (1 - fx) * fy, w11 = fx * fy;
  out[0] = img[i00]! * w00 + img[i00 + 3]! * w10 + img[i01]! * w01 + img[i01 + 3]! * w11;
  out[1] = img[i00 + 1]! * w00 + img[i00 + 4]! * w10 + img[i01 + 1]! * w01 + img[i01 + 4]! * w11;
  out[2] = img[i00 + 2]! * w00 + img[i00 + 5]! * w10 + img[i01 + 2]! * w01 + img[i01 + 5]! * w11;
  return out;
}
