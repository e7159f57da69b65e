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
 * - `articulationMetrics` (issue #29): per frame, what a viewer judges lip sync by: the inner-lip
 *   gap, mouth width and height relative to the reference at rest, how high the corners sit
 *   (a smile), and the teeth that show, read from the picture inside the lips' outer contour.
 * - `flickerRate`: zigzags (three consecutive frame-to-frame moves alternating in direction) in a
 *   per-frame track such as the mouth width or opening.
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

const OUTER = [48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59] as const;

export interface ArticulationMetrics {
  /** Inner-lip gap at the mouth centre in the mesh (px), and as a share of the rest mouth width. */
  gapPx: number;
  gap: number;
  /** Mouth width (outer corners 48-54) relative to the reference at rest. */
  width: number;
  /** Outer lip height (51 to 57, lips included) relative to the reference at rest. */
  height: number;
  /**
   * How far the mouth corners (48, 54) sit above the lip line at the centre (the middle of the
   * inner-lip gap), as a share of the rest mouth width: > 0 a smile, ~0 a neutral mouth.
   */
  cornerHeight: number;
  /**
   * Teeth pixels in the picture (bright, nearly unsaturated) inside the lips' outer contour and
   * within `teethBandPx` of the inner-lip contours: where teeth can show. Read from the picture,
   * so teeth texture the warp leaves between closed lips counts; the lips' own highlights (as
   * bright as teeth in a photo, further from the lip line) do not.
   */
  teethPixels: number;
  /**
   * The visible opening in the picture: over the central 30% of the mouth's columns, the mean
   * number of pixels between the outer lip contours that are cavity (dark) or teeth, neither lip
   * nor skin (px).
   */
  visibleGapPx: number;
}

/** Teeth: bright and nearly grey (lips and skin are both markedly redder than blue). */
const isTeeth = (img: Uint8Array, o: number) => luma(img, o) >= 195 && img[o]! - img[o + 2]! < 36;

/** The corners' height above the lip line at the centre, px (positive up), of a mesh. */
function cornerLiftPx(p: ArrayLike<number>): number {
  const stomion = (p[2 * 62 + 1]! + p[2 * 66 + 1]!) / 2;
  return stomion - (p[2 * 48 + 1]! + p[2 * 54 + 1]!) / 2;
}

/** The reference's own corner height (share of its mouth width): what a smiling photo holds. */
export function restCornerHeight(rig: FaceRig): number {
  return cornerLiftPx(rig.rest) / rig.mouthWidth;
}

/**
 * Measures lip articulation on one rendered RGB frame. `mesh` is the warped mesh that frame was
 * drawn with (the renderer's `mesh` after `render`).
 */
export function articulationMetrics(rig: FaceRig, mesh: Float32Array, image: Uint8Array): ArticulationMetrics {
  const W = rig.width, H = rig.height, r = rig.rest;
  const dist = (p: ArrayLike<number>, a: number, b: number) => Math.hypot(p[2 * b]! - p[2 * a]!, p[2 * b + 1]! - p[2 * a + 1]!);
  let xmin = Infinity, xmax = -Infinity, ymin = Infinity, ymax = -Infinity;
  for (const i of OUTER) {
    xmin = Math.min(xmin, mesh[2 * i]!); xmax = Math.max(xmax, mesh[2 * i]!);
    ymin = Math.min(ymin, mesh[2 * i + 1]!); ymax = Math.max(ymax, mesh[2 * i + 1]!);
  }
  let teeth = 0;
  const band = Math.max(1.5, 0.025 * rig.mouthWidth);
  const y0 = Math.max(0, Math.floor(ymin)), y1 = Math.min(H - 1, Math.ceil(ymax));
  for (let x = Math.max(0, Math.floor(xmin)); x <= Math.min(W - 1, Math.ceil(xmax)); x++) {
    const xc = x + 0.5;
    const yu = polyY(mesh, UPPER, xc), yl = polyY(mesh, LOWER, xc);
    if (yu === null || yl === null) continue;
    for (let y = Math.max(y0, Math.floor(yu - band)); y <= Math.min(y1, Math.ceil(yl + band)); y++) {
      const yc = y + 0.5;
      if (yc < yu - band || yc > yl + band || !insidePolygon(mesh, OUTER, xc, yc)) continue;
      if (isTeeth(image, (y * W + x) * 3)) teeth++;
    }
  }
  // The visible opening at the centre: non-lip pixels between the outer contours.
  let open = 0, columns = 0;
  const cx = (mesh[2 * 62]! + mesh[2 * 66]!) / 2, halfBand = 0.15 * rig.mouthWidth;
  for (let x = Math.max(0, Math.round(cx - halfBand)); x <= Math.min(W - 1, Math.round(cx + halfBand)); x++) {
    const top = polyY(mesh, [48, 49, 50, 51, 52, 53, 54], x + 0.5), bottom = polyY(mesh, [48, 59, 58, 57, 56, 55, 54], x + 0.5);
    if (top === null || bottom === null) continue;
    columns++;
    for (let y = Math.max(0, Math.ceil(top)); y <= Math.min(H - 1, Math.floor(bottom)); y++) {
      const o = (y * W + x) * 3;
      if (luma(image, o) < 100 || isTeeth(image, o)) open++;
    }
  }
  const gapPx = mesh[2 * 66 + 1]! - mesh[2 * 62 + 1]!;
  return {
    gapPx,
    gap: gapPx / rig.mouthWidth,
    width: dist(mesh, 48, 54) / dist(r, 48, 54),
    height: dist(mesh, 51, 57) / dist(r, 51, 57),
    cornerHeight: cornerLiftPx(mesh) / rig.mouthWidth,
    teethPixels: teeth,
    visibleGapPx: columns ? open / columns : 0,
  };
}

/** Even-odd point-in-polygon test over mesh points `idx`. */
function insidePolygon(p: Float32Array, idx: readonly number[], x: number, y: number): boolean {
  let inside = false;
  for (let i = 0, j = idx.length - 1; i < idx.length; j = i++) {
    const xi = p[2 * idx[i]!]!, yi = p[2 * idx[i]! + 1]!, xj = p[2 * idx[j]!]!, yj = p[2 * idx[j]! + 1]!;
    if ((yi > y) !== (yj > y) && x < ((xj - xi) * (y - yi)) / (yj - yi) + xi) inside = !inside;
  }
  return inside;
}

/**
 * Flicker in a per-frame track (mouth width, opening): the number of zigzags, three consecutive
 * frame-to-frame moves each of at least `minStep` that alternate in direction (up, down, up or
 * down, up, down: a shape held for a single frame and reversed), per second at 25 fps. A mouth
 * that opens and closes with the syllables reverses every 2-4 frames at most; one that follows
 * the noise of the loudness zigzags.
 */
export function flickerRate(track: readonly number[], minStep: number): number {
  let zigzags = 0;
  for (let i = 3; i < track.length; i++) {
    const a = track[i - 2]! - track[i - 3]!, b = track[i - 1]! - track[i - 2]!, c = track[i]! - track[i - 1]!;
    if (Math.abs(a) >= minStep && Math.abs(b) >= minStep && Math.abs(c) >= minStep && Math.sign(a) !== Math.sign(b) && Math.sign(b) !== Math.sign(c)) zigzags++;
  }
  return track.length > 1 ? zigzags / ((track.length - 1) / 25) : 0;
}
