/**
 * Renders poses of one rig to RGB frames: copy the base canvas, warp the moved triangles of the
 * mesh, paint the mouth interior and, where the lips close beyond the photo, their contact line. Clock-free and synchronous, so benches can call it directly.
 */
import { deformMesh, type FacePose } from './face-pose.ts';
import type { FaceRig } from './face-rig.ts';
import { MeshWarper } from './mesh-rasterizer.ts';
import { paintLipContact } from './lip-contact.ts';
import { mouthPalette, paintMouthInterior } from './mouth-interior.ts';

const RENDER = {
  /** Mesh displacements are rounded to 1/positionSteps px. */
  positionSteps: 8,
  /** Margin (px) around the lips' box the mouth painters may reach (soft edges, the contact band). */
  paintMarginPx: 6,
} as const;

export class FaceRenderer {
  /** Mesh positions of the last rendered pose (same layout as `rig.rest`). */
  readonly mesh: Float32Array;
  private readonly warper: MeshWarper;

  constructor(readonly rig: FaceRig, options: { engine?: 'wasm' | 'js' } = {}) {
    this.mesh = new Float32Array(rig.rest.length);
    this.warper = new MeshWarper(rig.base, rig.width, rig.height, options);
    // Measure the reference's mouth colours and teeth now, not in the first speaking frame.
    mouthPalette(rig);
  }

  get width(): number {
    return this.rig.width;
  }

  get height(): number {
    return this.rig.height;
  }

  /**
   * Renders `pose` into `target` when given (width * height * 3 bytes, overwritten), else into a
   * new RGB buffer.
   */
  render(pose: FacePose, target?: Uint8Array): Uint8Array {
    if (target && target.length !== this.rig.base.length) throw new RangeError(`render target must be ${this.rig.base.length} bytes, got ${target.length}`);
    const canvas = this.draw(pose);
    if (!target) return canvas.slice();
    target.set(canvas);
    return target;
  }

  /**
   * Renders `pose` into the renderer's own canvas and returns it (RGB): valid until the next
   * `draw` or `render`, for a caller that converts or encodes it at once (no copy).
   */
  draw(pose: FacePose): Uint8Array {
    const { rig, mesh } = this;
    deformMesh(rig, pose, mesh);
    // Displacements in steps of 1/8 px (invisible): a slowly moving part then keeps its exact
    // position for a few frames, and the incremental warp does not redraw it.
    const r = rig.rest;
    for (let i = 0; i < mesh.length; i++) mesh[i] = r[i]! + Math.round((mesh[i]! - r[i]!) * RENDER.positionSteps) / RENDER.positionSteps;
    this.warper.warp(rig.rest, mesh, rig.triangles);
    paintMouthInterior(rig, this.mesh, this.warper.canvas, pose.lipTuck * pose.speaking, pose.protrusion * pose.speaking);
    paintLipContact(rig, this.mesh, this.warper.canvas);
    // The painters stay inside the lips' box (plus their soft edges): the next warp redraws it.
    let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    for (let i = 48; i < 68; i++) {
      x0 = Math.min(x0, mesh[2 * i]!); x1 = Math.max(x1, mesh[2 * i]!);
      y0 = Math.min(y0, mesh[2 * i + 1]!); y1 = Math.max(y1, mesh[2 * i + 1]!);
    }
    const m = RENDER.paintMarginPx;
    this.warper.markDirty(x0 - m, y0 - m, x1 + m, y1 + m);
    return this.warper.canvas;
  }

  /**
   * Renders `pose` and converts it to I420 (plugins/face/i420.ts) into `out` when it is large
   * enough, else into a new buffer: the picture WebRTC sends, with no RGB copy in between.
   */
  drawI420(pose: FacePose, out?: Uint8Array): Uint8Array {
    this.draw(pose);
    return this.warper.toI420(out);
  }

  /** Inner-lip gap (px) at the mouth centre in the last rendered mesh. */
  mouthGapPx(): number {
    return this.mesh[2 * 66 + 1]! - this.mesh[2 * 62 + 1]!;
  }
}
