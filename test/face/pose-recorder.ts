/**
 * A face frame source on a raster that only records the poses it is asked to draw (no rig, no
 * pixels), with the articulation its animator is given per frame: for tests of what the source
 * decides (timing, turns, mouth shapes), cheap enough to play minutes of frames.
 */
import { FaceAnimator } from '../../plugins/face/face-animator.ts';
import { HumanFaceFrameSource } from '../../plugins/face/face-frame-source.ts';
import type { FacePose } from '../../plugins/face/face-pose.ts';
import type { FaceGeometry, FaceRaster, RasterResult } from '../../plugins/face/face-raster.ts';
import { resolveFaceOptions } from '../../plugins/face/configuration.ts';
import type { ArticulationInput } from '../../plugins/face/mouth-animator.ts';

/** Records every pose it is asked to draw; draws nothing. */
export class PoseRecorder implements FaceRaster {
  readonly width = 64;
  readonly height = 64;
  readonly threaded = false;
  readonly geometry: FaceGeometry = { width: 64, height: 64, faceWidth: 32, faceHeight: 40, headCentre: { x: 32, y: 30 }, mouthCentre: { x: 32, y: 44 } };
  readonly poses: FacePose[] = [];
  render(pose: FacePose): Promise<RasterResult> {
    this.poses.push({ ...pose });
    return Promise.resolve({ image: new Uint8Array(0), mouthGapPx: pose.jawOpen });
  }
  close(): void {}
}

export interface Face {
  readonly source: HumanFaceFrameSource;
  readonly raster: PoseRecorder;
  /** The articulation the animator got, per frame (undefined: none). */
  readonly articulation: Array<ArticulationInput | undefined>;
  readonly frames: Array<{ type: string; speechSamples: number | undefined }>;
}

export function openFace(turnHistoryMs?: number): Face {
  const options = resolveFaceOptions('human-portrait', { seed: 7 });
  const animator = new FaceAnimator(options, 7);
  const articulation: Array<ArticulationInput | undefined> = [];
  const step = animator.step.bind(animator);
  animator.step = (current, next, speaking, fadeRate, art, visitor) => {
    articulation.push(art ? { ...art } : undefined);
    return step(current, next, speaking, fadeRate, art, visitor);
  };
  const raster = new PoseRecorder();
  const source = new HumanFaceFrameSource(raster, animator);
  if (turnHistoryMs !== undefined) source.turnHistoryMs = turnHistoryMs;
  return { source, raster, articulation, frames: [] };
}

