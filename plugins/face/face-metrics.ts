/**
 * Measured proxies of how the face looks up close (issue #16), shared by the avatar bench and
 * the tests. They read rendered RGB frames plus the warped mesh that produced them; nothing here
 * runs per frame in a session.
 *
 * - `mouthMetrics`: inside the open mouth, the luminance spread of the cavity (p90 - p10 of the
 *   dark pixels: a flat colour gives ~0), the largest luminance step between neighbouring
 *   pixels across the lip borders (a hard edge gives the full lip-to-cavity contrast in one
 *   step), and the visible teeth area (bright, unsaturated pixels inside the lips).
 * - `motionEnergy`: mean absolute change between consecutive frames in the head region (the
 *   mouth box left out, so lip sync does not count) and in the torso region below the chin.
 * - `foldedTriangles`: mesh triangles whose orientation flipped (a fold would be a hard,
 *   draw-order edge in the warp).
 */
import type { FaceGeometry } from './face-raster.ts';
import type { FaceRig } from './face-rig.ts';

const UPPER = [60, 61, 62, 63, 64] as const;
const LOWER = [60, 67, 66, 65, 64] as const;

const luma = (img: Uint8Array, o: number) => 0.299 * img[o]! + 0.587 * img[o + 1]! + 0.114 * img[o + 2]!;

function polyY(p: Float32Array, idx: readonly number[], x: number): number | null {
  for (let k = 0; k < idx.length - 1; k++) {
    const xa = p[2 * idx[k]!]!, xb = p[2 * idx[k + 1]!]!;
    if (x >= xa && x <= xb && xb > xa) {
      const f = (x - xa) / (xb - xa);
      return p[2 * idx[k]! + 1]! + (p[2 * idx[k + 1]! + 1]! - p[2 * idx[k]! + 1]!) * f;
    }
  }
  return null;
}

export interface MouthMetrics {
  /** Inner-lip gap at the mouth centre (px). */
  gapPx: number;
  /** Dark (cavity) pixels inside the lips, and p90 - p10 of their luminance (0..255). */
  cavityPixels: number;
  cavitySpread: number;
  /**
   * Largest luminance step between vertically neighbouring pixels across a lip border where
   * the cavity meets the lip (columns whose pixel 2 px inside the border is dark), read from
   * 2 px inside to 3 px outside the border; 0 if no column qualifies.
   */
  maxBorderStep: number;
  /** Columns that qualified for `maxBorderStep`. */
  borderColumns: number;
  /** Bright, unsaturated (teeth) pixels inside the lips. */
  teethPixels: number;
}

/**
 * Measures the mouth of one rendered frame. `mesh` is the warped mesh of that frame (the
 * renderer's `mesh` after `render`). Columns over the central 70% of the mouth are read.
 */
export function mouthMetrics(rig: FaceRig, mesh: Float32Array, image: Uint8Array): MouthMetrics {
  const W = rig.width;
  const xl = mesh[2 * 60]!, xr = mesh[2 * 64]!, xm = (xl + xr) / 2, half = (xr - xl) / 2;
  const dark: number[] = [];
  let teeth = 0, maxStep = 0, borderColumns = 0;
  for (let x = Math.ceil(xm - 0.7 * half); x <= Math.floor(xm + 0.7 * half); x++) {
    const yu = polyY(mesh, UPPER, x + 0.5), yl = polyY(mesh, LOWER, x + 0.5);
    if (yu === null || yl === null) continue;
    // Strictly inside (1.5 px from either lip): cavity and teeth.
    for (let y = Math.ceil(yu + 1.5); y <= Math.floor(yl - 1.5); y++) {
      const o = (y * W + x) * 3, l = luma(image, o);
      if (l < 100) dark.push(l);
      else if (l >= 190 && image[o]! - image[o + 2]! < 40) teeth++;
    }
    if (yl - yu < 6) continue;
    // Across each border where the cavity meets the lip.
    for (const [yb, inward] of [[yu, 1], [yl, -1]] as const) {
      if (luma(image, (Math.floor(yb + 2 * inward) * W + x) * 3) >= 100) continue;
      borderColumns++;
      const from = Math.floor(inward > 0 ? yb - 3 : yb - 2), to = Math.floor(inward > 0 ? yb + 2 : yb + 3);
      for (let y = from; y < to; y++) {
        const a = luma(image, (y * W + x) * 3), b = luma(image, ((y + 1) * W + x) * 3);
        maxStep = Math.max(maxStep, Math.abs(a - b));
      }
    }
  }
  dark.sort((a, b) => a - b);
  const q = (p: number) => dark[Math.min(dark.length - 1, Math.floor(p * dark.length))]!;
  return {
    gapPx: mesh[2 * 66 + 1]! - mesh[2 * 62 + 1]!,
    cavityPixels: dark.length,
    cavitySpread: dark.length >= 20 ? q(0.9) - q(0.1) : 0,
    maxBorderStep: maxStep,
    borderColumns,
    teethPixels: teeth,
  };
}

export interface MotionEnergy {
  /** Mean absolute change per pixel and channel between consecutive frames (0..255). */
  head: number;
  torso: number;
}

/** Motion energy of a frame sequence in the head (mouth box excluded) and torso regions. */
export function motionEnergy(frames: readonly Uint8Array[], geometry: FaceGeometry, step = 2): MotionEnergy {
  const { width: W, height: H, headCentre: c, mouthCentre: mc, faceWidth: fw, faceHeight: fh } = geometry;
  const chinY = c.y + fh / 2;
  const head: number[] = [], torso: number[] = [];
  for (let y = 0; y < H; y += step) {
    for (let x = 0; x < W; x += step) {
      const o = (y * W + x) * 3;
      const inMouth = Math.abs(x - mc.x) < 0.4 * fw && Math.abs(y - mc.y) < 0.3 * fh;
      if (Math.abs(x - c.x) < 0.9 * fw && y > c.y - 1.1 * fh && y < chinY + 0.15 * fh && !inMouth) head.push(o);
      else if (y > chinY + 0.3 * fh && Math.abs(x - c.x) < 2.2 * fw) torso.push(o);
    }
  }
  const energy = (offsets: number[]) => {
    let sum = 0;
    for (let i = 1; i < frames.length; i++) {
      const a = frames[i - 1]!, b = frames[i]!;
      for (const o of offsets) sum += Math.abs(a[o]! - b[o]!) + Math.abs(a[o + 1]! - b[o + 1]!) + Math.abs(a[o + 2]! - b[o + 2]!);
    }
    return sum / Math.max(1, (frames.length - 1) * offsets.length * 3);
  };
  return { head: energy(head), torso: energy(torso) };
}

/** Triangles of `mesh` whose orientation differs from the rest mesh (folded over). */
export function foldedTriangles(rig: FaceRig, mesh: Float32Array): number {
  const t = rig.triangles, r = rig.rest;
  const area = (p: Float32Array, a: number, b: number, c: number) =>
    (p[2 * b]! - p[2 * a]!) * (p[2 * c + 1]! - p[2 * a + 1]!) - (p[2 * c]! - p[2 * a]!) * (p[2 * b + 1]! - p[2 * a + 1]!);
  let folded = 0;
  for (let i = 0; i < t.length; i += 3) {
    const a = t[i]!, b = t[i + 1]!, c = t[i + 2]!;
    const before = area(r, a, b, c), after = area(mesh, a, b, c);
    if (Math.abs(before) > 1e-3 && Math.sign(before) !== Math.sign(after)) folded++;
  }
  return folded;
}
