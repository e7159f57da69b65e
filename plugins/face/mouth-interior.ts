/**
 * The inside of the mouth when it opens wider than in the reference photo.
 *
 * Stretching the reference's few pixels of mouth interior would smear the teeth into a white
 * band, so the interior is composed instead, back to front:
 *
 * - a cavity with depth: darkest at the back (centre, under the palate), lit toward the cheeks
 *   and the lower lip, in colours derived from the reference's lips;
 * - a tongue hint rising from the floor of the mouth on wide (open-vowel) openings;
 * - lower teeth riding on the lower lip (so with the jaw), sampled from the reference when it
 *   shows them, growing a little on wide openings (synthetic references: only on wide openings);
 * - upper teeth anchored under the upper lip at their reference height (they do not grow: they
 *   are fixed to the skull), with the incisal edge found in the reference and drawn soft, the
 *   lip's shadow on their top and the sides receding into shade;
 * - both lip borders are smooth curves (cubic Hermite through the inner-lip landmarks, not the
 *   polyline) with anti-aliased coverage over about 1.5 px of perpendicular distance, and the
 *   wet inner edge of each lip is shaded toward the cavity so the border is a ramp, not a step.
 *
 * Colours (lip, skin, teeth) come from the reference, measured once per rig. A reference with
 * closed lips gets synthetic teeth in a teeth colour derived from the photo's exposure and skin.
 * All geometry is per column of the warped mouth, about 90 x 40 pixels at 720p.
 */
import type { FaceRig } from './face-rig.ts';
import {
  curveAt, curveOut, linearAt, LOWER, LOWER_OUTER, luma, polylineY, refPoint, sampleInto, smoothstep, UPPER, UPPER_OUTER, type Rgb,
} from './lip-curves.ts';

const MOUTH = {
  /** Below this reference gap (px) the reference shows no usable teeth: draw synthetic ones. */
  minReferenceGapPx: 2.5,
  /** Synthetic teeth heights as a fraction of the mouth width. */
  syntheticUpperTeeth: 0.1,
  syntheticLowerTeeth: 0.055,
  /** Extra lower-teeth height revealed on the widest openings (fraction of the mouth width). */
  lowerTeethReveal: 0.035,
  /** Opening (beyond the reference gap, fraction of the mouth width) over which that extra shows. */
  lowerTeethRevealFrom: 0.06,
  lowerTeethRevealTo: 0.22,
  /** Cavity height (fraction of the mouth width) over which the tongue appears. */
  tongueFrom: 0.04,
  tongueTo: 0.16,
  /** Anti-aliasing half-width of the lip borders, in pixels of perpendicular distance. */
  edgeSoftPx: 1.0,
  /** Share of the upper teeth a fully protruded upper lip covers. */
  roundCoversTeeth: 0.55,
  /** Width (px) of the darkened wet inner edge of each lip, and its strength. */
  lipEdgePx: 2.2,
  lipEdgeDarken: 0.7,
} as const;



/** Colours and teeth heights measured once per rig from its reference. */
interface MouthPalette {
  lip: Rgb;
  skin: Rgb;
  teeth: Rgb;
  cavityFar: Rgb;
  cavityNear: Rgb;
  tongue: Rgb;
  /** The wet inner edge of the lips, where they turn into the mouth. */
  lipInner: Rgb;
  synthetic: boolean;
  /** Upper / lower teeth height (px) at 33 stations along the curve parameter (0..4). */
  upperTeeth: Float32Array;
  lowerTeeth: Float32Array;
}

const palettes = new WeakMap<FaceRig, MouthPalette>();
const STATIONS = 33;

function averageAround(rig: FaceRig, points: Array<[number, number]>): Rgb {
  const acc: Rgb = [0, 0, 0], px: Rgb = [0, 0, 0];
  let n = 0;
  for (const [x, y] of points) {
    for (let dy = -1; dy <= 1; dy++) {
      for (let dx = -1; dx <= 1; dx++) {
        sampleInto(rig.base, rig.width, rig.height, x + dx, y + dy, px);
        acc[0] += px[0]; acc[1] += px[1]; acc[2] += px[2]; n++;
      }
    }
  }
  return [acc[0] / n, acc[1] / n, acc[2] / n];
}

/** Measures the reference's mouth colours and teeth heights (once per rig). */
export function mouthPalette(rig: FaceRig): MouthPalette {
  const cached = palettes.get(rig);
  if (cached) return cached;
  const r = rig.rest;
  const P = (i: number): [number, number] => [r[2 * i]!, r[2 * i + 1]!];
  const mix = (a: [number, number], b: [number, number], t: number): [number, number] => [a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t];
  const lip = averageAround(rig, [[50, 61], [51, 62], [52, 63], [58, 67], [57, 66], [56, 65]].map(([a, b]) => mix(P(a!), P(b!), 0.5)));
  const skin = averageAround(rig, [mix(P(48), P(4), 0.35), mix(P(54), P(12), 0.35), mix(P(33), P(51), 0.45)]);
  const refGap = Math.max(...rig.referenceGaps);
  const synthetic = refGap < MOUTH.minReferenceGapPx;

  // Teeth colour: the brightest quarter of the reference interior, or ivory at the photo's exposure.
  let teeth: Rgb;
  const upperTeeth = new Float32Array(STATIONS), lowerTeeth = new Float32Array(STATIONS);
  const px: Rgb = [0, 0, 0];
  if (!synthetic) {
    const samples: Rgb[] = [];
    for (let k = 1; k < STATIONS - 1; k++) {
      const q = (4 * k) / (STATIONS - 1), seg = Math.min(3, Math.floor(q));
      const [ux, uy] = refPoint(r, UPPER, seg, q - seg);
      if (!curveAt(r, LOWER, ux)) continue;
      for (let y = uy + 0.5; y < curveOut.y; y += 1) samples.push([...sampleInto(rig.base, rig.width, rig.height, ux, y, px)]);
    }
    samples.sort((a, b) => luma(b) - luma(a));
    const top = samples.slice(0, Math.max(1, Math.floor(samples.length / 4)));
    teeth = [0, 1, 2].map((c) => top.reduce((s, v) => s + v[c]!, 0) / top.length) as Rgb;
    // Teeth are brighter than lips: a pixel is tooth above a third of the way from lip to teeth.
    const threshold = luma(lip) + 0.35 * Math.max(10, luma(teeth) - luma(lip));
    // Per station: the first bright run below the upper lip is the upper teeth (its end is the
    // incisal edge); a second bright run after a dark gap, reaching the lower lip, is the lower
    // teeth. Stations where a seam between teeth hides the run are filled from their neighbours.
    for (let k = 0; k < STATIONS; k++) {
      const q = (4 * k) / (STATIONS - 1), seg = Math.min(3, Math.floor(q));
      const [ux, uy] = refPoint(r, UPPER, seg, q - seg);
      const gapU = curveAt(r, LOWER, ux) ? Math.max(0, curveOut.y - uy) : 0;
      const runs = brightRuns(rig, ux, uy, gapU, threshold, px);
      upperTeeth[k] = runs.length ? runs[0]![1] : Number.NaN;
      const last = runs.at(-1);
      lowerTeeth[k] = runs.length > 1 && last![0] - runs[0]![1] >= 1.5 && gapU - last![1] < 1.5 ? gapU - last![0] : 0;
    }
    fillAndMedian(upperTeeth); fillAndMedian(lowerTeeth);
    smooth(upperTeeth); smooth(lowerTeeth);
  } else {
    const exposure = Math.min(1.08, Math.max(0.7, luma(skin) / 165));
    teeth = [0, 1, 2].map((c) => ([236, 229, 214][c]! * 0.9 + skin[c]! * 0.1) * exposure) as Rgb;
  }
  // The inside of the mouth in the lips' own hue: luminance scaled down, the lip's chroma (its
  // difference from grey) kept or strengthened, so a photo's colour cast carries into the mouth.
  const lipL = luma(lip);
  const tone = (lumScale: number, chromaScale: number, lift = 0): Rgb =>
    [0, 1, 2].map((c) => Math.min(255, Math.max(0, lipL * lumScale + (lip[c]! - lipL) * chromaScale + lift))) as Rgb;
  const palette: MouthPalette = {
    lip, skin, teeth, synthetic, upperTeeth, lowerTeeth,
    cavityFar: tone(0.07, 0.45, 3),
    cavityNear: tone(0.3, 1.6),
    tongue: tone(0.72, 2.2),
    lipInner: tone(0.62, 1.3),
  };
  palettes.set(rig, palette);
  return palette;
}

/** Bright runs [start, end) (px below the upper lip) along a column of the reference interior. */
function brightRuns(rig: FaceRig, x: number, y: number, gap: number, threshold: number, px: Rgb): Array<[number, number]> {
  const runs: Array<[number, number]> = [];
  let open = -1;
  for (let d = 0.25; d < gap; d += 0.5) {
    const bright = luma(sampleInto(rig.base, rig.width, rig.height, x, y + d, px)) >= threshold;
    if (bright && open < 0) open = d - 0.25;
    if (!bright && open >= 0) { runs.push([open, d - 0.25]); open = -1; }
  }
  if (open >= 0) runs.push([open, gap]);
  // Runs split by a sub-pixel dip are one run.
  for (let i = runs.length - 1; i > 0; i--) if (runs[i]![0] - runs[i - 1]![1] < 1) { runs[i - 1]![1] = runs[i]![1]; runs.splice(i, 1); }
  return runs.filter(([a, b]) => b - a >= 1);
}

/** Fills NaN stations with the median of the known ones, then a 7-tap median and a 5-tap mean. */
function fillAndMedian(a: Float32Array): void {
  const known = Array.from(a).filter((v) => !Number.isNaN(v)).sort((p, q) => p - q);
  const med = known.length ? known[known.length >> 1]! : 0;
  for (let i = 0; i < a.length; i++) if (Number.isNaN(a[i]!)) a[i] = med;
  const c = Float32Array.from(a);
  for (let i = 0; i < a.length; i++) {
    const w: number[] = [];
    for (let k = -3; k <= 3; k++) if (i + k >= 0 && i + k < a.length) w.push(c[i + k]!);
    w.sort((p, q) => p - q);
    a[i] = w[w.length >> 1]!;
  }
}

function smooth(a: Float32Array): void {
  const c = Float32Array.from(a);
  for (let i = 0; i < a.length; i++) {
    let s = 0, n = 0;
    for (let k = -2; k <= 2; k++) if (i + k >= 0 && i + k < a.length) { s += c[i + k]!; n++; }
    a[i] = s / n;
  }
}

const teethHeights = new WeakMap<FaceRig, [number, number, number]>();

/**
 * Height (px) of the upper teeth below the upper lip at the inner-lip pairs (61,67), (62,66),
 * (63,65): found in the reference, or the synthetic teeth's. Where a tucked lower lip meets them.
 */
export function upperTeethHeights(rig: FaceRig): readonly [number, number, number] {
  let h = teethHeights.get(rig);
  if (!h) {
    const pal = mouthPalette(rig);
    h = [1, 2, 3].map((q) => (pal.synthetic ? MOUTH.syntheticUpperTeeth * rig.mouthWidth : tableAt(pal.upperTeeth, Math.min(3, q), q === 4 ? 1 : 0))) as [number, number, number];
    teethHeights.set(rig, h);
  }
  return h;
}

const tableAt = (t: Float32Array, seg: number, frac: number) => {
  const q = ((seg + frac) / 4) * (STATIONS - 1), i = Math.min(STATIONS - 2, Math.floor(q));
  return t[i]! + (t[i + 1]! - t[i]!) * (q - i);
};

const upperTex: Rgb = [0, 0, 0], lowerTex: Rgb = [0, 0, 0], lipU: Rgb = [0, 0, 0], lipL: Rgb = [0, 0, 0];

/**
 * Paints the mouth interior into `out` where the warped mouth is open wider than the reference.
 * `tuck` (0..1): the lower lip is tucked under the upper teeth (f, v): the upper teeth reach
 * down to it and the lower teeth are hidden. `round` (0..1): the lips are pushed forward into a
 * rounded opening (u, o, w): the interior is composed even where the mouth opens less than the
 * photo (squeezing the photo's teeth into a narrow opening looks like fangs), the protruding
 * upper lip covers more of the upper teeth and the lower ones are hidden, so the opening is dark.
 */
export function paintMouthInterior(rig: FaceRig, moved: Float32Array, out: Uint8Array, tuck = 0, round = 0): void {
  const { width: W, height: H, base, rest } = rig;
  const xl = moved[2 * 60]!, xr = moved[2 * 64]!;
  if (!(xr > xl)) return;
  const pal = mouthPalette(rig);
  const mw = rig.mouthWidth;
  const xMid = (xl + xr) / 2, half = (xr - xl) / 2;
  const x0 = Math.max(0, Math.floor(xl)), x1 = Math.min(W - 1, Math.ceil(xr));
  const soft = MOUTH.edgeSoftPx, edgePx = MOUTH.lipEdgePx;
  // How far the mouth opens beyond the photo, at its centre: the composed interior fades in over
  // the first 2.5 px (at the photo's own opening the warped reference shows, unchanged).
  const centreOpening = moved[2 * 66 + 1]! - moved[2 * 62 + 1]! - rig.referenceGaps[1];
  const centreGap = moved[2 * 66 + 1]! - moved[2 * 62 + 1]!;
  const rounding = round * smoothstep(0.5, 2.5, centreGap);
  const globalStrength = Math.max(smoothstep(0.25, 2.5, centreOpening), rounding);
  if (globalStrength <= 0) return;
  for (let x = x0; x <= x1; x++) {
    const xc = x + 0.5;
    if (!curveAt(moved, UPPER, xc)) continue;
    const yu = curveOut.y, nu = 1 / Math.sqrt(1 + curveOut.slope * curveOut.slope);
    const segU = curveOut.seg, fracU = curveOut.frac;
    if (!curveAt(moved, LOWER, xc)) continue;
    const yl = curveOut.y, nl = 1 / Math.sqrt(1 + curveOut.slope * curveOut.slope);
    const segL = curveOut.seg, fracL = curveOut.frac;
    const gap = yl - yu;
    if (gap <= 0) continue;
    // The same places on the reference curves (by curve parameter, not by x).
    const [rxu, ryu] = refPoint(rest, UPPER, segU, fracU);
    const [rxl, ryl] = refPoint(rest, LOWER, segL, fracL);
    const refGap = Math.max(0, ryl - ryu);
    // Columns that open less than the photo (a narrowing mouth) keep the warped reference.
    const strength = globalStrength * Math.max(smoothstep(-1.5, 0.5, gap - refGap), rounding * smoothstep(0.3, 1.5, gap));
    if (strength <= 0) continue;
    const u = Math.min(1, Math.abs(xc - xMid) / half);
    const across = Math.sqrt(Math.max(0, 1 - u * u));
    const sideShade = 0.5 + 0.5 * Math.sqrt(across);
    const opening = Math.max(gap - refGap, rounding * gap);

    let hu: number, hl: number, hlRef: number;
    if (pal.synthetic) {
      hu = Math.min(MOUTH.syntheticUpperTeeth * mw, gap * 0.32) * (0.75 + 0.25 * across);
      hlRef = 0;
      hl = MOUTH.syntheticLowerTeeth * mw * smoothstep(0.15 * mw, 0.3 * mw, gap) * Math.sqrt(Math.max(0, 1 - (u / 0.72) ** 2));
    } else {
      hu = Math.min(tableAt(pal.upperTeeth, segU, fracU), refGap);
      hlRef = tableAt(pal.lowerTeeth, segL, fracL);
      // The lower incisors and canines show in the middle; the lip covers them toward the corners.
      const centre = Math.max(0, 1 - (u / 0.72) ** 2);
      hl = hlRef + MOUTH.lowerTeethReveal * mw * smoothstep(MOUTH.lowerTeethRevealFrom * mw, MOUTH.lowerTeethRevealTo * mw, opening) * Math.sqrt(centre);
    }
    if (rounding > 0) { hu *= 1 - MOUTH.roundCoversTeeth * rounding; hl *= 1 - rounding; }
    if (tuck > 0) { hu += (gap - hu) * tuck; hl *= 1 - tuck; }
    hu = Math.min(hu, gap);
    hl = Math.min(hl, Math.max(0, gap - hu));
    const cavTop = yu + hu, cavBot = yl - hl, cav = Math.max(0, cavBot - cavTop);
    const tongue = smoothstep(MOUTH.tongueFrom * mw, MOUTH.tongueTo * mw, cav);
    const tongueTop = cavBot - tongue * 0.45 * cav * Math.sqrt(across);

    // The lips just outside the reference's inner edge: partly covered border pixels blend the
    // interior with these (the warp's pixels just inside the border are reference interior).
    // Sampled a third of the way into each lip: the reference's own inner rim blends lip and
    // teeth, and riding on the moving lip it would show as a grey outline.
    const [oxu, oyu] = linearAt(rest, UPPER_OUTER, segU, fracU), [oxl, oyl] = linearAt(rest, LOWER_OUTER, segL, fracL);
    sampleInto(base, W, H, rxu + (oxu - rxu) * 0.35, ryu + (oyu - ryu) * 0.35, lipU);
    sampleInto(base, W, H, rxl + (oxl - rxl) * 0.35, ryl + (oyl - ryl) * 0.35, lipL);
    const darken = MOUTH.lipEdgeDarken * Math.min(1, opening / 4);
    const ypu = polylineY(moved, UPPER, segU, fracU), ypl = polylineY(moved, LOWER, segL, fracL);
    const yStart = Math.max(0, Math.floor(yu - edgePx - 1)), yEnd = Math.min(H - 1, Math.ceil(yl + edgePx + 1));
    for (let y = yStart; y <= yEnd; y++) {
      const yc = y + 0.5;
      const du = (yc - yu) * nu, dl = (yl - yc) * nl; // perpendicular distances inside the lips
      const o = (y * W + x) * 3;
      // The wet inner edge of each lip, shaded toward the opening.
      const nearUpper = du < dl;
      const d = nearUpper ? du : dl;
      const wet = darken * smoothstep(-(edgePx + soft), soft, d);
      const li = pal.lipInner;
      if (du < -soft || dl < -soft) {
        // The lip's inner rim, outside the smooth opening: repainted in the lip's colour going
        // wet toward the opening (between the curve and the landmark polyline the warp drew
        // stretched reference interior; along the rim, the photo's lip-teeth blend).
        const lip = nearUpper ? lipU : lipL;
        const w = (yc > ypu && yc < ypl ? 1 : smoothstep(-(edgePx + soft + 1), -soft, d)) * strength;
        if (w > 0) {
          out[o] = out[o]! + (lip[0] + (li[0] - lip[0]) * wet - out[o]!) * w;
          out[o + 1] = out[o + 1]! + (lip[1] + (li[1] - lip[1]) * wet - out[o + 1]!) * w;
          out[o + 2] = out[o + 2]! + (lip[2] + (li[2] - lip[2]) * wet - out[o + 2]!) * w;
        }
        continue;
      }
      const cover = smoothstep(-soft, soft, du) * smoothstep(-soft, soft, dl);
      const t = yc - yu; // down from the upper lip
      const b = yl - yc; // up from the lower lip

      // Cavity: darkest at the back (centre, under the palate), lit toward the walls and the floor.
      const v = cav > 0 ? Math.min(1, Math.max(0, (yc - cavTop) / cav)) : 0.5;
      const dv = (v - 0.38) / (v < 0.38 ? 0.38 : 0.62);
      const depth = Math.sqrt(Math.max(0, (1 - u * u) * (1 - dv * dv))) * smoothstep(0, 0.12 * mw, cav);
      const lit = (1 - depth) * (0.55 + 0.45 * v);
      let cr = pal.cavityFar[0] + (pal.cavityNear[0] - pal.cavityFar[0]) * lit;
      let cg = pal.cavityFar[1] + (pal.cavityNear[1] - pal.cavityFar[1]) * lit;
      let cb = pal.cavityFar[2] + (pal.cavityNear[2] - pal.cavityFar[2]) * lit;
      if (tongue > 0 && yc > tongueTop - 1) {
        // Tongue: lit on its front and middle, fading into the dark toward the back.
        // Its top edge turns away from the light: it rises out of the dark, over ~2.5 px.
        const ta = smoothstep(tongueTop - 1, tongueTop + 1.5, yc) * tongue;
        const front = Math.min(1, Math.max(0, (yc - tongueTop) / Math.max(1, cavBot - tongueTop)));
        const k = (0.2 + 0.65 * Math.sqrt(front)) * (0.55 + 0.45 * across);
        cr += (pal.tongue[0] * k - cr) * ta; cg += (pal.tongue[1] * k - cg) * ta; cb += (pal.tongue[2] * k - cb) * ta;
      }
      // Lower teeth: ride on the lower lip, in the upper teeth's shadow, receding at the sides.
      if (hl > 0 && b < hl + soft) {
        // A band thinner than a pixel is still behind the lip: it emerges over 0.5-2 px.
        const ta = smoothstep(hl + soft, hl - soft, b) * smoothstep(0.5, 2, hl);
        let tr: number, tg: number, tb: number;
        if (pal.synthetic || hlRef < 1) {
          const k = sideShade * 0.9 * toothShade(xc, xMid, mw * 0.8);
          tr = pal.teeth[0] * k; tg = pal.teeth[1] * k; tb = pal.teeth[2] * k;
        } else {
          sampleInto(base, W, H, rxl, ryl - Math.min(hlRef - 0.5, b * (hlRef / hl)), lowerTex);
          const k = 0.82 * sideShade;
          tr = lowerTex[0] * k; tg = lowerTex[1] * k; tb = lowerTex[2] * k;
        }
        // The lower lip's edge shades the roots; the top edge (incisal) catches a little light.
        const shade = 0.8 + 0.2 * smoothstep(0, 1.5, b);
        cr += (tr * shade - cr) * ta; cg += (tg * shade - cg) * ta; cb += (tb * shade - cb) * ta;
      }
      // Upper teeth: under the upper lip, in its shadow at the top, a soft incisal edge.
      if (hu > 0 && t < hu + soft) {
        const ta = smoothstep(hu + soft, hu - soft, t);
        let tr: number, tg: number, tb: number;
        if (pal.synthetic) {
          const k = sideShade * toothShade(xc, xMid, mw) * (0.85 + 0.15 * Math.min(1, t / Math.max(1, hu)));
          tr = pal.teeth[0] * k; tg = pal.teeth[1] * k; tb = pal.teeth[2] * k;
        } else {
          sampleInto(base, W, H, rxu, ryu + Math.min(t, hu - 0.5), upperTex);
          tr = upperTex[0] * sideShade; tg = upperTex[1] * sideShade; tb = upperTex[2] * sideShade;
        }
        // The upper lip's shadow on the teeth is warm (light through the lip).
        const shade = smoothstep(0, 2.2, t);
        tr *= 0.74 + 0.26 * shade; tg *= 0.64 + 0.36 * shade; tb *= 0.64 + 0.36 * shade;
        cr += (tr - cr) * ta; cg += (tg - cg) * ta; cb += (tb - cb) * ta;
      }
      if (cover < 1) {
        const lip = nearUpper ? lipU : lipL, c = 1 - cover;
        cr = cr * cover + (lip[0] + (li[0] - lip[0]) * wet) * c;
        cg = cg * cover + (lip[1] + (li[1] - lip[1]) * wet) * c;
        cb = cb * cover + (lip[2] + (li[2] - lip[2]) * wet) * c;
      }
      out[o] = out[o]! + (cr - out[o]!) * strength;
      out[o + 1] = out[o + 1]! + (cg - out[o + 1]!) * strength;
      out[o + 2] = out[o + 2]! + (cb - out[o + 2]!) * strength;
    }
  }
}

/** Synthetic teeth: a slightly darker seam between neighbouring teeth (incisors wider than the rest). */
function toothShade(x: number, xMid: number, mw: number): number {
  const d = Math.abs(x - xMid) / mw;
  // Seams at the centre line and at the edges of the central incisors, laterals and canines.
  const seams = [0, 0.1, 0.18, 0.255];
  let nearest = 1;
  for (const s of seams) nearest = Math.min(nearest, Math.abs(d - s));
  return 0.9 + 0.1 * smoothstep(0, 0.015, nearest);
}
