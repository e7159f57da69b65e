/**
 * The expensive half of a frame: a pose in, an RGB picture out. The cheap half (turn queue,
 * audio windows, the animator's pose) stays with the frame source on the caller's thread; the
 * raster runs either inline (`InlineFaceRaster`) or on a render worker thread
 * (`render-pool.ts`), with identical pixels: both run the same `FaceRenderer` on the same rig.
 */
import sharp from 'sharp';
import { REST_POSE, type FacePose } from './face-pose.ts';
import { FaceRenderer } from './face-renderer.ts';
import type { FaceRig } from './face-rig.ts';

/** Rig metrics the caller may need without holding the rig (crops, overlays). Canvas pixels. */
export interface FaceGeometry {
  readonly width: number;
  readonly height: number;
  readonly faceWidth: number;
  readonly faceHeight: number;
  readonly headCentre: { readonly x: number; readonly y: number };
  readonly mouthCentre: { readonly x: number; readonly y: number };
}

/**
 * `rgb` (default): width*height*3 bytes. `i420`: planar YUV 4:2:0 (plugins/face/i420.ts), made
 * where the picture is rendered (the worker thread), for sessions that go to WebRTC. `jpeg`:
 * encoded where it is rendered (sharp), for `/realtime` sessions: only the JPEG bytes come back.
 */
export type RasterFormat = 'rgb' | 'i420' | 'jpeg';

/** Encodes RGB bytes to JPEG (libjpeg-turbo through sharp, on libuv's thread pool). */
export async function encodeRgbJpeg(rgb: Uint8Array, width: number, height: number, quality: number): Promise<Uint8Array> {
  const input = Buffer.from(rgb.buffer, rgb.byteOffset, rgb.byteLength);
  const jpeg = await sharp(input, { raw: { width, height, channels: 3 } }).jpeg({ quality, chromaSubsampling: '4:2:0', optimiseCoding: false }).toBuffer();
  return new Uint8Array(jpeg.buffer, jpeg.byteOffset, jpeg.length);
}

export interface RasterResult {
  /** width * height * 3 RGB bytes (I420 bytes for `i420`, JPEG bytes for `jpeg`): `target` (its memory, possibly a new view on it) when one was given. */
  readonly image: Uint8Array;
  /** Inner-lip gap (px) at the mouth centre of the rendered mesh (lip-sync measurements). */
  readonly mouthGapPx: number;
}

export interface FaceRaster {
  readonly width: number;
  readonly height: number;
  readonly geometry: FaceGeometry;
  /** Whether renders leave the calling thread. */
  readonly threaded: boolean;
  /**
   * Renders `pose` into `target` when given (overwritten; a threaded raster transfers its buffer,
   * so `target` is unusable until the promise settles and the picture is `image`), else into a
   * new buffer. Renders of one raster complete in call order.
   */
  render(pose: FacePose, target?: Uint8Array, format?: RasterFormat, jpegQuality?: number): Promise<RasterResult>;
  /** Frees the rig (and its worker-side state). Renders after it reject. */
  close(): void;
}

export function rigGeometry(rig: FaceRig): FaceGeometry {
  return {
    width: rig.width, height: rig.height, faceWidth: rig.faceWidth, faceHeight: rig.faceHeight,
    headCentre: { ...rig.headCentre }, mouthCentre: { ...rig.mouthCentre },
  };
}

/** Renders on the calling thread (option `renderThreads: 0`, virtual clocks). */
export class InlineFaceRaster implements FaceRaster {
  readonly renderer: FaceRenderer;
  readonly geometry: FaceGeometry;
  readonly threaded = false;
  private closed = false;
  /** The last JPEG render, while its encoder reads the canvas (never rejects). */
  private encoding: Promise<unknown> = Promise.resolve();

  constructor(rig: FaceRig) {
    this.renderer = new FaceRenderer(rig);
    this.renderer.draw(REST_POSE); // first-touch costs here, not in frame 0 (see render-worker.ts)
    this.geometry = rigGeometry(rig);
  }

  get width(): number { return this.renderer.width; }
  get height(): number { return this.renderer.height; }

  async render(pose: FacePose, target?: Uint8Array, format: RasterFormat = 'rgb', jpegQuality = 85): Promise<RasterResult> {
    if (this.closed) throw new Error('face raster is closed');
    if (format === 'jpeg') {
      // The encoder reads the canvas asynchronously: renders queue behind the one encoding.
      const done = this.encoding.then(async () => {
        const canvas = this.renderer.draw(pose);
        const mouthGapPx = this.renderer.mouthGapPx();
        const image = await encodeRgbJpeg(canvas, this.width, this.height, jpegQuality);
        return { image, mouthGapPx };
      });
      this.encoding = done.catch(() => undefined);
      return done;
    }
    await this.encoding;
    if (format === 'i420') {
      return { image: this.renderer.drawI420(pose, target), mouthGapPx: this.renderer.mouthGapPx() };
    }
    const image = this.renderer.render(pose, target);
    return { image, mouthGapPx: this.renderer.mouthGapPx() };
  }

  close(): void {
    this.closed = true;
  }
}
