/**
 * Facial landmarks with @vladmandic/face-api on the tfjs WebAssembly backend (the only tfjs
 * backend that runs here). The detector (SSD MobileNet v1) and the 68-point landmark net ship
 * inside the face-api package under `model/`, so nothing is downloaded.
 *
 * face-api's node-wasm build `require`s the umbrella `@tensorflow/tfjs` package, of which only
 * `tfjs-core` and the wasm backend are installed; the loader points that one name at
 * `tfjs-core` and adds the chained tensor methods (`t.as3D(...)`) that the umbrella package
 * would have registered. Everything runs on one global tfjs engine, so detections are serialised.
 */
import Module, { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type { FaceLandmarks } from '../../processors/avatar/face-model.ts';
import { FaceModelError } from '../../processors/avatar/face-model.ts';

/** Decoded RGB image (3 bytes per pixel, row-major). */
export interface RgbImage {
  readonly width: number;
  readonly height: number;
  readonly data: Uint8Array;
}

export interface LandmarkDetector {
  readonly name: string;
  /** Number of detections run so far (each distinct image should cost exactly one). */
  readonly detections: number;
  detect(image: RgbImage, imageSha256: string): Promise<FaceLandmarks>;
}

const DETECTOR_DEFAULTS = {
  /** Minimum SSD confidence for a face to count. */
  minConfidence: 0.3,
  /** Larger images are downscaled to this longest side before detection (speed; landmarks are scaled back). */
  maxDetectionSide: 1024,
} as const;

type FaceApi = any;
const require = createRequire(import.meta.url);
let loading: Promise<FaceApi> | undefined;

function addChainedTensorMethods(tfc: any): void {
  const proto = tfc.Tensor.prototype;
  const reshape = (t: any, shape: number[]) => tfc.reshape(t, shape);
  const special: Record<string, (this: any, ...a: any[]) => unknown> = {
    as1D() { return reshape(this, [this.size]); },
    as2D(r: number, c: number) { return reshape(this, [r, c]); },
    as3D(r: number, c: number, d: number) { return reshape(this, [r, c, d]); },
    as4D(r: number, c: number, d: number, e: number) { return reshape(this, [r, c, d, e]); },
    asScalar() { return reshape(this, []); },
    asType(dtype: string) { return tfc.cast(this, dtype); },
    toFloat() { return tfc.cast(this, 'float32'); },
    toInt() { return tfc.cast(this, 'int32'); },
    flatten() { return reshape(this, [this.size]); },
    concat(x: unknown, axis?: number) { return tfc.concat([this].concat(x as any), axis); },
    stack(x: unknown, axis?: number) { return tfc.stack([this].concat(x as any), axis); },
  };
  for (const [name, fn] of Object.entries(special)) if (!(name in proto)) proto[name] = fn;
  // Every other op takes the tensor as its first argument: `t.op(...a)` is `tf.op(t, ...a)`.
  for (const [name, fn] of Object.entries(tfc)) {
    if (typeof fn === 'function' && /^[a-z]/.test(name) && !(name in proto)) {
      proto[name] = function (this: unknown, ...args: unknown[]) { return (fn as any)(this, ...args); };
    }
  }
}

/** Runs `fn`, then removes any process-wide crash handlers it installed. */
async function withoutCrashHandlers<T>(fn: () => Promise<T>): Promise<T> {
  const events = ['uncaughtException', 'unhandledRejection'] as const;
  const before = new Map(events.map((e) => [e, new Set(process.listeners(e as any))]));
  try {
    return await fn();
  } finally {
    // The emscripten runtime of the wasm backend rethrows every unhandled rejection, which would
    // turn any stray rejection anywhere in the server into a process crash.
    for (const e of events) {
      for (const l of process.listeners(e as any)) if (!before.get(e)!.has(l)) process.removeListener(e, l as any);
    }
  }
}

async function loadFaceApi(): Promise<FaceApi> {
  return withoutCrashHandlers(loadFaceApiModules);
}

async function loadFaceApiModules(): Promise<FaceApi> {
  const tfc = require('@tensorflow/tfjs-core');
  addChainedTensorMethods(tfc);
  const coreEntry = require.resolve('@tensorflow/tfjs-core');
  const M = Module as unknown as { _resolveFilename: (req: string, ...rest: unknown[]) => string };
  const original = M._resolveFilename;
  M._resolveFilename = function (this: unknown, req: string, ...rest: unknown[]) {
    return original.call(this, req === '@tensorflow/tfjs' ? coreEntry : req, ...rest);
  };
  let faceapi: FaceApi;
  try {
    faceapi = require('@vladmandic/face-api/dist/face-api.node-wasm.js');
  } finally {
    M._resolveFilename = original;
  }
  const wasm = require('@tensorflow/tfjs-backend-wasm');
  wasm.setWasmPaths(dirname(require.resolve('@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm.wasm')) + '/');
  if (!(await faceapi.tf.setBackend('wasm'))) throw new Error('tfjs wasm backend failed to initialise');
  await faceapi.tf.ready();
  const modelDir = join(dirname(require.resolve('@vladmandic/face-api/package.json')), 'model');
  await faceapi.nets.ssdMobilenetv1.loadFromDisk(modelDir);
  await faceapi.nets.faceLandmark68Net.loadFromDisk(modelDir);
  return faceapi;
}

/** Loads face-api and its two nets once per process. */
export function faceApi(): Promise<FaceApi> {
  loading ??= loadFaceApi().catch((err) => {
    loading = undefined;
    throw err;
  });
  return loading;
}

export class FaceApiLandmarkDetector implements LandmarkDetector {
  readonly name = 'face-api/ssd-mobilenet-v1+landmark68';
  private count = 0;
  private queue: Promise<unknown> = Promise.resolve();

  get detections(): number {
    return this.count;
  }

  detect(image: RgbImage, imageSha256: string): Promise<FaceLandmarks> {
    const run = this.queue.then(() => this.detectNow(image, imageSha256));
    this.queue = run.catch(() => undefined);
    return run;
  }

  private async detectNow(image: RgbImage, imageSha256: string): Promise<FaceLandmarks> {
    this.count++;
    const faceapi = await faceApi();
    const scale = Math.min(1, DETECTOR_DEFAULTS.maxDetectionSide / Math.max(image.width, image.height));
    const input = scale < 1 ? downscale(image, scale) : image;
    const tensor = faceapi.tf.tensor3d(input.data, [input.height, input.width, 3], 'int32');
    let result: any;
    try {
      result = await faceapi
        .detectSingleFace(tensor, new faceapi.SsdMobilenetv1Options({ minConfidence: DETECTOR_DEFAULTS.minConfidence }))
        .withFaceLandmarks();
    } finally {
      tensor.dispose();
    }
    if (!result) {
      throw new FaceModelError('no_face_detected', 'no face found in the reference image; use a well-lit, front-facing portrait');
    }
    const inv = 1 / scale;
    const points: number[] = [];
    for (const p of result.landmarks.positions as Array<{ x: number; y: number }>) points.push(p.x * inv, p.y * inv);
    const box = result.detection.box;
    return {
      version: 1,
      imageSha256,
      imageWidth: image.width,
      imageHeight: image.height,
      points,
      box: { x: box.x * inv, y: box.y * inv, width: box.width * inv, height: box.height * inv },
      score: result.detection.score,
      detector: this.name,
    };
  }
}

/** Box-filter downscale, only used to bound detection cost on very large uploads. */
function downscale(image: RgbImage, scale: number): RgbImage {
  const width = Math.max(1, Math.round(image.width * scale));
  const height = Math.max(1, Math.round(image.height * scale));
  const data = new Uint8Array(width * height * 3);
  for (let y = 0; y < height; y++) {
    const sy = Math.min(image.height - 1, Math.floor(y / scale));
    for (let x = 0; x < width; x++) {
      const sx = Math.min(image.width - 1, Math.floor(x / scale));
      const s = (sy * image.width + sx) * 3;
      const d = (y * width + x) * 3;
      data[d] = image.data[s]!;
      data[d + 1] = image.data[s + 1]!;
      data[d + 2] = image.data[s + 2]!;
    }
  }
  return { width, height, data };
}
