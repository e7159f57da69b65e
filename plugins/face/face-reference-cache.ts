/**
 * Reference images: decoded once and their landmarks computed once per distinct image (keyed
 * by the sha256 of the bytes). Landmarks are plain JSON (`FaceLandmarks`) so the server can
 * store them next to the asset and hand them back, which skips detection entirely.
 */
import { createHash } from 'node:crypto';
import sharp from 'sharp';
import type { FaceLandmarks, FaceReference } from '../../processors/avatar/face-model.ts';
import { FaceModelError } from '../../processors/avatar/face-model.ts';
import type { LandmarkDetector, RgbImage } from './landmark-detector.ts';
import { WorkerLandmarkDetector } from './landmark-worker.ts';

const CACHE_DEFAULTS = {
  /** Landmark sets kept in memory (small JSON each). */
  maxLandmarkEntries: 512,
  /** Decoded images kept in memory (a 1024x1024 image is 3 MB). */
  maxDecodedEntries: 8,
  /** Uploads above this many pixels are refused before decoding. */
  maxInputPixels: 40_000_000,
} as const;

export interface PreparedReference {
  readonly reference: FaceReference;
  readonly rgb: RgbImage;
}

/** Insertion-ordered map used as a small LRU. */
class Lru<V> {
  private readonly map = new Map<string, V>();
  constructor(private readonly max: number) {}
  get(key: string): V | undefined {
    const v = this.map.get(key);
    if (v !== undefined) {
      this.map.delete(key);
      this.map.set(key, v);
    }
    return v;
  }
  set(key: string, value: V): void {
    this.map.delete(key);
    this.map.set(key, value);
    while (this.map.size > this.max) this.map.delete(this.map.keys().next().value!);
  }
  delete(key: string): void {
    this.map.delete(key);
  }
}

export function sha256Hex(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

export async function decodeImage(bytes: Uint8Array): Promise<RgbImage> {
  if (!(bytes instanceof Uint8Array) || bytes.length === 0) {
    throw new FaceModelError('invalid_image', 'reference image is empty');
  }
  try {
    const { data, info } = await sharp(bytes, { limitInputPixels: CACHE_DEFAULTS.maxInputPixels })
      .rotate()
      .removeAlpha()
      .toColourspace('srgb')
      .raw()
      .toBuffer({ resolveWithObject: true });
    if (info.channels !== 3) throw new Error(`unexpected channel count ${info.channels}`);
    return { width: info.width, height: info.height, data: new Uint8Array(data.buffer, data.byteOffset, data.length) };
  } catch (err) {
    throw new FaceModelError('invalid_image', `reference image could not be decoded as PNG or JPEG: ${(err as Error).message}`);
  }
}

/** Whether stored landmarks are well formed and belong to these image bytes. */
export function landmarksMatch(landmarks: FaceLandmarks | undefined, sha256: string): landmarks is FaceLandmarks {
  return !!landmarks
    && landmarks.version === 1
    && landmarks.imageSha256 === sha256
    && Array.isArray(landmarks.points)
    && landmarks.points.length === 136
    && landmarks.points.every((v) => Number.isFinite(v));
}

export class FaceReferenceCache {
  private readonly landmarks: Lru<Promise<FaceLandmarks>>;
  private readonly decoded: Lru<Promise<RgbImage>>;

  constructor(readonly detector: LandmarkDetector = new WorkerLandmarkDetector()) {
    this.landmarks = new Lru(CACHE_DEFAULTS.maxLandmarkEntries);
    this.decoded = new Lru(CACHE_DEFAULTS.maxDecodedEntries);
  }

  /**
   * Decodes the image and returns its landmarks: the given ones when they match the bytes,
   * else the cached ones, else one detection (concurrent callers share it).
   */
  async prepare(image: Uint8Array, known?: FaceLandmarks): Promise<PreparedReference> {
    const sha = sha256Hex(image);
    let rgbPromise = this.decoded.get(sha);
    if (!rgbPromise) {
      rgbPromise = decodeImage(image);
      this.decoded.set(sha, rgbPromise);
      rgbPromise.catch(() => this.decoded.delete(sha));
    }
    const rgb = await rgbPromise;
    if (landmarksMatch(known, sha)) {
      if (!this.landmarks.get(sha)) this.landmarks.set(sha, Promise.resolve(known));
      return { reference: { image, landmarks: known }, rgb };
    }
    let pending = this.landmarks.get(sha);
    if (!pending) {
      pending = this.detector.detect(rgb, sha);
      this.landmarks.set(sha, pending);
      pending.catch(() => this.landmarks.delete(sha));
    }
    return { reference: { image, landmarks: await pending }, rgb };
  }
}

let shared: FaceReferenceCache | undefined;

/** The process-wide cache every face model shares unless given its own. */
export function sharedFaceReferenceCache(): FaceReferenceCache {
  shared ??= new FaceReferenceCache();
  return shared;
}
