/**
 * The rig of one (reference image, canvas) pair, built once per session: the base canvas (the
 * framed reference on the background), the control mesh (68 landmarks plus derived points),
 * its Delaunay triangles, and per-point weights saying how each point follows the jaw, the
 * head and the body. Everything per frame (`deformMesh`, the rasteriser) reads only this.
 */
import sharp from 'sharp';
import type { FaceLandmarks } from '../../processors/avatar/face-model.ts';
import type { FaceOptions } from './configuration.ts';
import { delaunay } from './delaunay.ts';
import type { RgbImage } from './landmark-detector.ts';

const RIG_DEFAULTS = {
  /** head-and-shoulders crop: margin above the brows and below the chin, in face heights. */
  cropAboveBrowsFaceHeights: 1.35,
  cropBelowChinFaceHeights: 1.75,
  /** Width of the feathered image edge against the background (fraction of the placed image's short side). */
  featherFraction: 0.05,
  /** Points on the hair ring and the outer (neck/shoulder/background) ring. */
  headRingPoints: 14,
  outerRingPoints: 18,
  outerRingScale: 1.5,
  /**
   * Corner height above the lip line (fraction of the mouth width) a neutral mouth may have
   * (landmark noise): relaxed corners sit on the line, a neutral photo's are left where they are.
   */
  neutralCornerLift: 0.01,
} as const;

/** Index groups of the iBUG 68-point layout and of the derived points appended after it. */
export const LM = {
  jaw: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16],
  chin: 8,
  browsLeft: [17, 18, 19, 20, 21],
  browsRight: [22, 23, 24, 25, 26],
  noseTip: 30,
  eyeLeft: [36, 37, 38, 39, 40, 41],
  eyeRight: [42, 43, 44, 45, 46, 47],
  mouthOuter: [48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59],
  innerUpper: [60, 61, 62, 63, 64],
  innerLower: [60, 67, 66, 65, 64],
} as const;

export interface FaceRig {
  readonly width: number;
  readonly height: number;
  /** Canvas RGB with the framed reference on the background: the texture every frame warps. */
  readonly base: Uint8Array;
  /** Rest positions of the mesh points in canvas pixels, [x0, y0, ...]; 0..67 are the landmarks. */
  readonly rest: Float32Array;
  readonly triangles: Uint16Array;
  readonly pointCount: number;
  /** Per point: how much the head pose applies (1 on the face, 0 on the canvas border). */
  readonly headWeight: Float32Array;
  /** Per point: fraction of the lower-lip drop it follows (jaw, chin, lower cheeks). */
  readonly jawWeight: Float32Array;
  /** Per point: how much breathing and shoulder sway move it. */
  readonly bodyWeight: Float32Array;
  /** Per point: depth toward the camera (px) for the parallax of head turns and nods. */
  readonly depth: Float32Array;
  readonly foreheadPoints: readonly number[];
  readonly lidFoldLeft: readonly number[];
  readonly lidFoldRight: readonly number[];
  readonly eyeCentreLeft: number;
  readonly eyeCentreRight: number;
  /** Face metrics in canvas pixels. */
  readonly faceWidth: number;
  readonly faceHeight: number;
  readonly mouthWidth: number;
  readonly eyeWidth: number;
  readonly mouthCentre: { readonly x: number; readonly y: number };
  /** Head rotation centre (2D) and roll pivot (the neck). */
  readonly headCentre: { readonly x: number; readonly y: number };
  readonly neckPivot: { readonly x: number; readonly y: number };
  /** Inner-lip gaps of the reference for the pairs (61,67), (62,66), (63,65). */
  readonly referenceGaps: readonly [number, number, number];
  /**
   * How far the reference's mouth corners sit above a neutral mouth's (px): their height above
   * the lip line at the centre beyond `RIG_DEFAULTS.neutralCornerLift`. 0 for a neutral photo.
   */
  readonly smileLiftPx: number;
  /** The two cheek points beside the mouth corners (they follow the corners a little). */
  readonly cornerCheeks: readonly number[];
}

interface Placement {
  cropX: number;
  cropY: number;
  cropW: number;
  cropH: number;
  /** Where the crop lands on the canvas (may overflow it with `cover`). */
  dx: number;
  dy: number;
  dw: number;
  dh: number;
}

const pt = (p: ArrayLike<number>, i: number) => ({ x: p[2 * i]!, y: p[2 * i + 1]! });
const mean = (p: ArrayLike<number>, idx: readonly number[]) => {
  let x = 0, y = 0;
  for (const i of idx) { x += p[2 * i]!; y += p[2 * i + 1]!; }
  return { x: x / idx.length, y: y / idx.length };
};

function placement(image: RgbImage, lm: FaceLandmarks, options: FaceOptions): Placement {
  let cropX = 0, cropY = 0, cropW = image.width, cropH = image.height;
  if (options.framing === 'head-and-shoulders') {
    const p = lm.points;
    const browY = (mean(p, LM.browsLeft).y + mean(p, LM.browsRight).y) / 2;
    const chin = pt(p, LM.chin);
    const faceH = Math.max(8, chin.y - browY);
    const top = browY - RIG_DEFAULTS.cropAboveBrowsFaceHeights * faceH;
    const bottom = chin.y + RIG_DEFAULTS.cropBelowChinFaceHeights * faceH;
    cropH = Math.min(image.height, bottom - top);
    cropW = Math.min(image.width, cropH * (options.width / options.height));
    const cx = (pt(p, 0).x + pt(p, 16).x) / 2;
    cropX = Math.min(Math.max(0, cx - cropW / 2), image.width - cropW);
    cropY = Math.min(Math.max(0, top), image.height - cropH);
    cropX = Math.round(cropX); cropY = Math.round(cropY);
    cropW = Math.max(1, Math.round(cropW)); cropH = Math.max(1, Math.round(cropH));
  }
  const scale = options.fit === 'cover'
    ? Math.max(options.width / cropW, options.height / cropH)
    : Math.min(options.width / cropW, options.height / cropH);
  const dw = Math.max(1, Math.round(cropW * scale));
  const dh = Math.max(1, Math.round(cropH * scale));
  return { cropX, cropY, cropW, cropH, dx: Math.round((options.width - dw) / 2), dy: Math.round((options.height - dh) / 2), dw, dh };
}

/** Background plus the resized crop, feathered where its edge lies inside the canvas. */
async function baseCanvas(image: RgbImage, pl: Placement, options: FaceOptions): Promise<Uint8Array> {
  const { width: W, height: H } = options;
  const resized = await sharp(image.data, { raw: { width: image.width, height: image.height, channels: 3 } })
    .extract({ left: pl.cropX, top: pl.cropY, width: pl.cropW, height: pl.cropH })
    .resize(pl.dw, pl.dh, { kernel: 'lanczos3', fit: 'fill' })
    .raw()
    .toBuffer();
  const out = new Uint8Array(W * H * 3);
  const [br, bg, bb] = options.background;
  for (let i = 0; i < W * H; i++) { out[3 * i] = br; out[3 * i + 1] = bg; out[3 * i + 2] = bb; }
  const feather = Math.max(1, RIG_DEFAULTS.featherFraction * Math.min(pl.dw, pl.dh));
  const featherL = pl.dx > 0, featherR = pl.dx + pl.dw < W, featherT = pl.dy > 0, featherB = pl.dy + pl.dh < H;
  const x0 = Math.max(0, pl.dx), x1 = Math.min(W, pl.dx + pl.dw);
  const y0 = Math.max(0, pl.dy), y1 = Math.min(H, pl.dy + pl.dh);
  for (let y = y0; y < y1; y++) {
    const ly = y - pl.dy;
    let ay = 1;
    if (featherT) ay = Math.min(ay, (ly + 0.5) / feather);
    if (featherB) ay = Math.min(ay, (pl.dh - ly - 0.5) / feather);
    for (let x = x0; x < x1; x++) {
      const lx = x - pl.dx;
      let a = ay;
      if (featherL) a = Math.min(a, (lx + 0.5) / feather);
      if (featherR) a = Math.min(a, (pl.dw - lx - 0.5) / feather);
      a = a >= 1 ? 1 : a * a * (3 - 2 * a);
      const s = (ly * pl.dw + lx) * 3, d = (y * W + x) * 3;
      out[d] = resized[s]! * a + br * (1 - a);
      out[d + 1] = resized[s + 1]! * a + bg * (1 - a);
      out[d + 2] = resized[s + 2]! * a + bb * (1 - a);
    }
  }
  return out;
}

export async function buildFaceRig(image: RgbImage, landmarks: FaceLandmarks, options: FaceOptions): Promise<FaceRig> {
  const pl = placement(image, landmarks, options);
  const base = await baseCanvas(image, pl, options);
  const scale = pl.dw / pl.cropW;
  const lmc: number[] = [];
  for (let i = 0; i < 68; i++) {
    lmc.push((landmarks.points[2 * i]! - pl.cropX) * scale + pl.dx, (landmarks.points[2 * i + 1]! - pl.cropY) * scale + pl.dy);
  }
  const points: number[] = [...lmc];
  const head: number[] = new Array(68).fill(1);
  const jaw: number[] = new Array(68).fill(0);
  const body: number[] = new Array(68).fill(0);
  const add = (x: number, y: number, h: number, j: number, b: number) => {
    points.push(x, y); head.push(h); jaw.push(j); body.push(b);
    return head.length - 1;
  };
  const mid = (a: number, b: number, t = 0.5) => {
    const pa = pt(lmc, a), pb = pt(lmc, b);
    return { x: pa.x + (pb.x - pa.x) * t, y: pa.y + (pb.y - pa.y) * t };
  };

  const browY = (mean(lmc, LM.browsLeft).y + mean(lmc, LM.browsRight).y) / 2;
  const chin = pt(lmc, LM.chin);
  const faceHeight = chin.y - browY;
  const faceWidth = Math.hypot(lmc[32]! - lmc[0]!, lmc[33]! - lmc[1]!);
  const centre = { x: (lmc[0]! + lmc[32]!) / 2, y: (browY + chin.y) / 2 };
  const eyeL = mean(lmc, LM.eyeLeft), eyeR = mean(lmc, LM.eyeRight);
  const eyeWidth = (Math.hypot(lmc[78]! - lmc[72]!, lmc[79]! - lmc[73]!) + Math.hypot(lmc[90]! - lmc[84]!, lmc[91]! - lmc[85]!)) / 2;
  const mouthWidth = Math.hypot(lmc[108]! - lmc[96]!, lmc[109]! - lmc[97]!);
  const mouthCentre = mean(lmc, [48, 54, 51, 57]);

  // Jaw contour follows the lower lip more the closer it is to the chin (the jaw hinges at the ears).
  const earY = (lmc[1]! + lmc[33]!) / 2;
  for (const k of LM.jaw) jaw[k] = Math.pow(Math.min(1, Math.max(0, (lmc[2 * k + 1]! - earY) / (chin.y - earY))), 1.6);
  for (const k of [55, 56, 57, 58, 59, 65, 66, 67]) jaw[k] = 1;
  for (const k of [48, 54, 60, 64]) jaw[k] = 0.35;

  const foreheadPoints = [17, 19, 21, 22, 24, 26].map((i) => {
    const p = pt(lmc, i);
    return add(p.x + (p.x - centre.x) * 0.08, p.y - 0.5 * faceHeight, 1, 0, 0);
  });
  const lidFoldLeft = [[18, 37], [20, 38]].map(([a, b]) => { const m = mid(a!, b!, 0.55); return add(m.x, m.y, 1, 0, 0); });
  const lidFoldRight = [[23, 43], [25, 44]].map(([a, b]) => { const m = mid(a!, b!, 0.55); return add(m.x, m.y, 1, 0, 0); });
  const eyeCentreLeft = add(eyeL.x, eyeL.y, 1, 0, 0);
  const eyeCentreRight = add(eyeR.x, eyeR.y, 1, 0, 0);
  const cornerCheeks: number[] = [];
  for (const [a, b, j] of [[3, 48, 0.4], [13, 54, 0.4], [1, 31, 0], [15, 35, 0], [5, 59, 0.7], [11, 55, 0.7]] as const) {
    const m = mid(a, b);
    const i = add(m.x, m.y, 1, j, 0);
    if (b === 48 || b === 54) cornerCheeks.push(i);
  }
  for (const [a, b] of [[57, 8], [58, 7], [56, 9]] as const) { const m = mid(a, b); add(m.x, m.y, 1, 0.95, 0); }
  // Neck: a row below the chin, narrower than the jaw, far enough from the jaw line that nods
  // and turns never fold the triangles between them.
  for (const k of [3, 5, 8, 11, 13]) {
    const p = pt(lmc, k);
    add(centre.x + (p.x - centre.x) * 0.75, chin.y + 0.35 * faceHeight, 0.45, 0.2, 0.6);
  }
  // Hair ring: the upper 240 degrees of an ellipse around the face (the neck points cover the bottom).
  const rx = 0.95 * faceWidth, ry = 1.05 * faceHeight, ringCy = centre.y - 0.2 * faceHeight;
  /** Whether (x, y) lies within the (fixed) outer ring around the head: torso points stay out of it. */
  const insideRing = (x: number, y: number) =>
    ((x - centre.x) / (RIG_DEFAULTS.outerRingScale * rx)) ** 2 + ((y - ringCy) / (RIG_DEFAULTS.outerRingScale * ry)) ** 2 < 1.1;
  for (let i = 0; i < RIG_DEFAULTS.headRingPoints; i++) {
    const a = (-210 + (240 * i) / (RIG_DEFAULTS.headRingPoints - 1)) * (Math.PI / 180);
    add(centre.x + rx * Math.cos(a), ringCy + ry * Math.sin(a), 0.95, 0, 0);
  }
  const { width: W, height: H } = options;
  for (let i = 0; i < RIG_DEFAULTS.outerRingPoints; i++) {
    const a = (2 * Math.PI * i) / RIG_DEFAULTS.outerRingPoints;
    // Fixed around the head: the band between the hair ring and this ring absorbs head motion,
    // which keeps the area re-rendered per frame (and so the cost) small. Below the chin the
    // ring lies on the torso and breathes and sways with it.
    const x = centre.x + RIG_DEFAULTS.outerRingScale * rx * Math.cos(a), y = ringCy + RIG_DEFAULTS.outerRingScale * ry * Math.sin(a);
    add(x, y, 0, 0, 0.8 * Math.min(1, Math.max(0, (y - chin.y - 0.15 * faceHeight) / (0.6 * faceHeight))));
  }
  // Torso: a shoulder line that breathes and sways, ending in fixed anchors a little beyond the
  // shoulders, over a fixed chest line: the upper chest stretches with the breath as a real one
  // does, the background to the sides and everything below the chest stay still, and the area
  // re-rendered per frame (the cost) stays bounded. Points off the canvas are left out.
  for (const [dy, xs] of [[0.85, [[0, 1], [0.6, 1], [1.2, 1], [1.8, 0.8], [2.5, 0]]], [1.5, [[0, 0], [0.9, 0], [1.8, 0], [2.5, 0]]]] as const) {
    for (const [fx, b] of xs) {
      for (const sign of fx === 0 ? [1] : [-1, 1]) {
        const x = centre.x + sign * fx * faceWidth, y = chin.y + dy * faceHeight;
        if (x < 0.02 * W || x > 0.98 * W || y > 0.97 * H || insideRing(x, y)) continue;
        add(x, y, 0, 0, b);
      }
    }
  }
  for (const [fx, fy] of [[0, 0], [0.25, 0], [0.5, 0], [0.75, 0], [1, 0], [1, 0.33], [1, 0.66], [1, 1], [0.75, 1], [0.5, 1], [0.25, 1], [0, 1], [0, 0.66], [0, 0.33]] as const) {
    add(fx * (W - 1), fy * (H - 1), 0, 0, 0);
  }

  const n = head.length;
  const depth = new Float32Array(n);
  const rzx = 0.6 * faceWidth, rzy = 0.85 * faceHeight, zMax = 0.45 * faceWidth;
  for (let i = 0; i < n; i++) {
    if (head[i]! < 0.9) continue;
    const dx = (points[2 * i]! - centre.x) / rzx, dy = (points[2 * i + 1]! - centre.y) / rzy;
    depth[i] = zMax * Math.sqrt(Math.max(0, 1 - dx * dx - dy * dy));
  }
  for (const [k, z] of [[27, 0.06], [28, 0.1], [29, 0.15], [30, 0.22], [31, 0.1], [32, 0.13], [33, 0.16], [34, 0.13], [35, 0.1]] as const) {
    depth[k] = depth[k]! + z * faceWidth;
  }

  return {
    width: W,
    height: H,
    base,
    rest: Float32Array.from(points),
    triangles: delaunay(points),
    pointCount: n,
    headWeight: Float32Array.from(head),
    jawWeight: Float32Array.from(jaw),
    bodyWeight: Float32Array.from(body),
    depth,
    foreheadPoints,
    lidFoldLeft,
    lidFoldRight,
    eyeCentreLeft,
    eyeCentreRight,
    faceWidth,
    faceHeight,
    mouthWidth,
    eyeWidth,
    mouthCentre,
    headCentre: centre,
    neckPivot: { x: centre.x, y: chin.y + 0.4 * faceHeight },
    referenceGaps: [
      Math.max(0, lmc[135]! - lmc[123]!),
      Math.max(0, lmc[133]! - lmc[125]!),
      Math.max(0, lmc[131]! - lmc[127]!),
    ],
    smileLiftPx: Math.max(0, (lmc[125]! + lmc[133]!) / 2 - (lmc[97]! + lmc[109]!) / 2 - RIG_DEFAULTS.neutralCornerLift * mouthWidth),
    cornerCheeks,
  };
}
