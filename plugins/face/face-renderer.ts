/**
 * Renders poses of one rig to RGB frames: copy the base canvas, warp the moved triangles of the
 * mesh, paint the mouth interior. Clock-free and synchronous, so benches can call it directly.
 */
import { deformMesh, type FacePose } from './face-pose.ts';
import type { FaceRig } from './face-rig.ts';
import { warpMesh } from './mesh-rasterizer.ts';
import { paintMouthInterior } from './mouth-interior.ts';

export class FaceRenderer {
  /** Mesh positions of the last rendered pose (same layout as `rig.rest`). */
  readonly mesh: Float32Array;

  constructor(readonly rig: FaceRig) {
    this.mesh = new Float32Array(rig.rest.length);
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
    const { rig } = this;
    deformMesh(rig, pose, this.mesh);
    if (target && target.length !== rig.base.length) throw new RangeError(`render target must be ${rig.base.length} bytes, got ${target.length}`);
    target?.set(rig.base);
    const out = target ?? rig.base.slice();
    warpMesh(rig.base, out, rig.width, rig.height, rig.rest, this.mesh, rig.triangles);
    paintMouthInterior(rig, this.mesh, out);
    return out;
  }

  /** Inner-lip gap (px) at the mouth centre in the last rendered mesh. */
  mouthGapPx(): number {
    return this.mesh[2 * 66 + 1]! - this.mesh[2 * 62 + 1]!;
  }
}
