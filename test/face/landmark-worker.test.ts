/**
 * Landmark detection runs on a worker thread (plugins/face/landmark-worker.ts): face-api and
 * tfjs never load into the calling thread, results equal the in-thread detector's, a photo
 * without a face is the same typed error, and the worker stops when closed or idle.
 */
import test from 'ava';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import sharp from 'sharp';
import { FaceModelError } from '../../processors/avatar/face-model.ts';
import { DEFAULT_FACE_IMAGE_PATH, FaceApiLandmarkDetector, FaceReferenceCache, WorkerLandmarkDetector } from '../../plugins/face/index.ts';
import { until } from '../../testing/until.ts';

const require = createRequire(import.meta.url);
const faceApiLoadedHere = () => Object.keys(require.cache).some((k) => k.includes('@vladmandic/face-api') || k.includes('tfjs-backend-wasm'));

async function rgbOf(bytes: Uint8Array) {
  const { data, info } = await sharp(bytes).removeAlpha().raw().toBuffer({ resolveWithObject: true });
  return { width: info.width, height: info.height, data: new Uint8Array(data) };
}

test.serial('detections run on the worker: the same landmarks as in-thread, face-api never loaded here', async (t) => {
  const image = await rgbOf(new Uint8Array(readFileSync(DEFAULT_FACE_IMAGE_PATH)));
  const worker = new WorkerLandmarkDetector();
  t.teardown(() => worker.close());
  t.false(worker.running);
  const landmarks = await worker.detect(image, 'sha-a');
  t.true(worker.running);
  t.is(worker.detections, 1);
  t.is(landmarks.points.length, 136);
  t.is(landmarks.imageSha256, 'sha-a');
  t.false(faceApiLoadedHere(), 'face-api and tfjs stay out of this thread');
  // The in-thread detector (loaded last, so the check above means something) finds the same points.
  const here = await new FaceApiLandmarkDetector().detect(image, 'sha-a');
  t.deepEqual(landmarks, here);
  t.true(faceApiLoadedHere());
});

test('a photo without a face is FaceModelError no_face_detected, and the worker keeps serving', async (t) => {
  const worker = new WorkerLandmarkDetector();
  t.teardown(() => worker.close());
  const grey = { width: 256, height: 256, data: new Uint8Array(256 * 256 * 3).fill(128) };
  const err = await t.throwsAsync(worker.detect(grey, 'grey'), { instanceOf: FaceModelError });
  t.is(err!.code, 'no_face_detected');
  const face = await rgbOf(new Uint8Array(readFileSync(DEFAULT_FACE_IMAGE_PATH)));
  t.is((await worker.detect(face, 'face')).points.length, 136);
});

test('the worker stops when idle past its shutdown delay, and a later detection starts it again', async (t) => {
  const worker = new WorkerLandmarkDetector({ idleShutdownMs: 50 });
  t.teardown(() => worker.close());
  const face = await rgbOf(new Uint8Array(readFileSync(DEFAULT_FACE_IMAGE_PATH)));
  await worker.detect(face, 'x');
  await until(() => !worker.running, { timeoutMs: 5000 });
  t.false(worker.running);
  t.is((await worker.detect(face, 'y')).points.length, 136);
  await worker.close();
  t.false(worker.running);
});

test('the reference cache detects on the worker by default', (t) => {
  t.true(new FaceReferenceCache().detector instanceof WorkerLandmarkDetector);
});

test('closing the detector rejects a detection in flight (no caller waits forever); the cache then detects anew', async (t) => {
  const worker = new WorkerLandmarkDetector();
  t.teardown(() => worker.close());
  const face = await rgbOf(new Uint8Array(readFileSync(DEFAULT_FACE_IMAGE_PATH)));
  const inFlight = worker.detect(face, 'closing');
  await worker.close();
  await t.throwsAsync(inFlight, { message: /closed/ });
  t.false(worker.running);
  t.is((await worker.detect(face, 'after')).points.length, 136, 'a later detection starts a new worker');
});
