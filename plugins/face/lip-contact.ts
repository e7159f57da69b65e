/**
 * Where the lips close more than in the photo (a bilabial, a tucked lip), the warp brings the
 * two lips' inner rims together, and in a smiling photo those rims are half teeth: the closed
 * mouth showed a thin bright line of teeth texture between the lips. This repaints, in columns
 * where the lips nearly touch, a narrow band around the contact line in each lip's own colour
 * (sampled a third of the way into that lip, as the interior does) with the soft darker line
 * real lips show where they press together. It fades in as the gap closes below 2 px and as the
 * column closes beyond the photo's own opening, so an open mouth and the photo at rest are
 * untouched.
 */
import type { FaceRig } from './face-rig.ts';
import {
  curveAt, curveOut, linearAt, LOWER, LOWER_OUTER, luma, refPoint, sampleInto, smoothstep, UPPER, UPPER_OUTER, type Rgb,
} from './lip-curves.ts';
import { mouthPalette } from './mouth-interior.ts';

const CONTACT = {
  /** Gap (px) below which the lips count as touching: fully at `touchPx`, not at all at `nearPx`. */
  touchPx: 0.4,
  nearPx: 2,
  /**
   * Height of the repainted band above and below the contact line (fraction of the mouth width,
   * at least 1.2 px): the lower lip's rim held more of the photo's teeth (it touched them).
   */
  upperBandOfMouth: 0.03,
  lowerBandOfMouth: 0.04,
  /** Darkness and half-width (px) of the line where the lips press together. */
  seamStrength: 0.5,
  seamPx: 0.7,
} as const;

const lipU: Rgb = [0, 0, 0], lipL: Rgb = [0, 0, 0];

export function paintLipContact(rig: FaceRig, moved: Float32Array, out: Uint8Array): void {
  const { width: W, height: H, base, rest } = rig;
  const xl = moved[2 * 60]!, xr = moved[2 * 64]!;
  if (!(xr > xl)) return;
  const bandUp = Math.max(1.2, CONTACT.upperBandOfMouth * rig.mouthWidth), bandDown = Math.max(1.2, CONTACT.lowerBandOfMouth * rig.mouthWidth);
  const palette = mouthPalette(rig), seamTone = palette.lipInner, lipLuma = luma(palette.lip);
  for (let x = Math.max(0, Math.floor(xl)); x <= Math.min(W - 1, Math.ceil(xr)); x++) {
    const xc = x + 0.5;
    if (!curveAt(moved, UPPER, xc)) continue;
    const yu = curveOut.y, segU = curveOut.seg, fracU = curveOut.frac;
    if (!curveAt(moved, LOWER, xc)) continue;
    const yl = curveOut.y, segL = curveOut.seg, fracL = curveOut.frac;
    const gap = yl - yu;
    const [rxu, ryu] = refPoint(rest, UPPER, segU, fracU);
    const [rxl, ryl] = refPoint(rest, LOWER, segL, fracL);
    // Only where the lips touch, and touch where the photo's were apart.
    const contact = (1 - smoothstep(CONTACT.touchPx, CONTACT.nearPx, gap)) * smoothstep(0.15, 0.9, ryl - ryu - gap);
    if (contact <= 0) continue;
    const [oxu, oyu] = linearAt(rest, UPPER_OUTER, segU, fracU), [oxl, oyl] = linearAt(rest, LOWER_OUTER, segL, fracL);
    sampleInto(base, W, H, rxu + (oxu - rxu) * 0.35, ryu + (oyu - ryu) * 0.35, lipU);
    sampleInto(base, W, H, rxl + (oxl - rxl) * 0.35, ryl + (oyl - ryl) * 0.35, lipL);
    // Near the corners, where a lip is thin, the sample can land on the photo's teeth (bright and
    // grey): the lips' mean colour there.
    for (const lip of [lipU, lipL]) if (luma(lip) > lipLuma + 18 && lip[0] - lip[2] < 40) lip.splice(0, 3, ...palette.lip);
    const seamY = (yu + yl) / 2;
    for (let y = Math.max(0, Math.floor(seamY - bandUp - 1)); y <= Math.min(H - 1, Math.ceil(seamY + bandDown)); y++) {
      const d = y + 0.5 - seamY, band = d < 0 ? bandUp : bandDown;
      const w = contact * (1 - smoothstep(band - 1, band, Math.abs(d)));
      if (w <= 0) continue;
      const lip = d < 0 ? lipU : lipL;
      const seam = CONTACT.seamStrength * Math.exp(-((d / CONTACT.seamPx) ** 2));
      const o = (y * W + x) * 3;
      for (let c = 0; c < 3; c++) {
        const colour = lip[c]! + (seamTone[c]! * 0.75 - lip[c]!) * seam;
        out[o + c] = out[o + c]! + (colour - out[o + c]!) * w;
      }
    }
  }
}
