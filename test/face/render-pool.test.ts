import test from 'ava';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { RealClock } from '../../core/clock.ts';
import type { FaceFrame } from '../../processors/avatar/face-model.ts';
import {
  configuredRenderThreads, DEFAULT_FACE_IMAGE_PATH, defaultRenderThreads, FaceReferenceCache, FaceRenderError, FaceRenderPool, HumanFaceModel,
  resolveFaceOptions, sharedFaceRenderPool, WorkerFaceRaster, type HumanFaceFrameSource,
} from '../../plugins/face/index.ts';
import { syntheticPhrase } from './speech-signal.ts';
import { i420Length, rgbToI420 } from '../../plugins/face/i420.ts';
import { encodeRgbJpeg } from '../../plugins/face/face-raster.ts';
import sharp from 'sharp';
import { rgbaToI420 } from '../../transports/webrtc/avatar-media.ts';
import { until } from '../../testing/until.ts';

const SMALL = { width: 320, height: 180 };
const cache = new FaceReferenceCache();
const inline = new HumanFaceModel('human-portrait', { referenceCache: cache, renderThreads: 0 });
const pooled = new HumanFaceModel('human-portrait', { referenceCache: cache });

/** Idle frames, a spoken phrase, a cancel in the middle of the next one, then idle again. */
async function script(source: HumanFaceFrameSource, frames = 70): Promise<Array<{ frame: FaceFrame; gap: number }>> {
  const out: Array<{ frame: FaceFrame; gap: number }> = [];
  const take = async () => {
    const frame = await source.nextFrame();
    out.push({ frame: { ...frame, image: { ...frame.image, data: frame.image.data.slice() } }, gap: source.lastMouthGapPx });
  };
  for (let i = 0; i < 5; i++) await take();
  source.pushAudio(syntheticPhrase(4));
  source.endTurn();
  for (let i = 0; i < 35; i++) await take();
  source.pushAudio(syntheticPhrase(6));
  for (let i = 0; i < 10; i++) await take();
  source.cancel();
  while (out.length < frames) await take();
  return out;
}

function sameFrames(t: import('ava').ExecutionContext, a: Array<{ frame: FaceFrame; gap: number }>, b: Array<{ frame: FaceFrame; gap: number }>) {
  t.is(a.length, b.length);
  let differing = 0;
  a.forEach((x, i) => {
    const y = b[i]!;
    t.is(x.frame.index, y.frame.index);
    t.is(x.frame.type, y.frame.type);
    t.deepEqual(Array.from(x.frame.audio), Array.from(y.frame.audio));
    t.is(x.gap, y.gap);
    if (!Buffer.from(x.frame.image.data).equals(Buffer.from(y.frame.image.data))) differing++;
  });
  t.is(differing, 0, `${differing} of ${a.length} pictures differ`);
}

test('a source renders the same pixels through a render worker as inline (byte-identical), with or without reused buffers', async (t) => {
  t.timeout(180_000); // up to 20 s in loaded CI runs (longer beside other work); bounded well above that, and above the 120 s a test may otherwise go without a result
  const a = await inline.openSource({ configuration: { ...SMALL, seed: 11 } });
  const b = await pooled.openSource({ configuration: { ...SMALL, seed: 11 } });
  const c = await pooled.openSource({ configuration: { ...SMALL, seed: 11 } });
  c.recycleImages(2); // buffers go to the worker and come back every frame
  t.false(a.raster.threaded);
  t.true(b.raster.threaded && c.raster.threaded);
  const [ra, rb, rc] = await Promise.all([script(a), script(b), script(c)]);
  t.true(ra.some((f) => f.frame.type === 'speech') && ra.some((f) => f.frame.type === 'fade-out'));
  t.true(ra.some((f) => f.gap > 3), 'the mouth opened');
  sameFrames(t, ra, rb);
  sameFrames(t, ra, rc);
  for (const s of [a, b, c]) s.close();
  await t.throwsAsync(b.nextFrame(), { message: /closed/ });
});

test('I420 pictures made on the render worker equal the inline RGB pictures converted, and match libyuv within a level', async (t) => {
  const rgb = await inline.openSource({ configuration: { ...SMALL, seed: 5 } });
  const workerI420 = await pooled.openSource({ configuration: { ...SMALL, seed: 5 } });
  const inlineI420 = await inline.openSource({ configuration: { ...SMALL, seed: 5 } });
  workerI420.setImageFormat('i420');
  inlineI420.setImageFormat('i420');
  const [r, w, n] = await Promise.all([script(rgb, 30), script(workerI420, 30), script(inlineI420, 30)]);
  t.true(w.every((f) => f.frame.image.format === 'i420' && f.frame.image.data.length === i420Length(SMALL.width, SMALL.height)));
  sameFrames(t, w, n);
  const converted = r.map((f) => ({ ...f, frame: { ...f.frame, image: { ...f.frame.image, format: 'i420' as const, data: rgbToI420(f.frame.image.data, SMALL.width, SMALL.height) } } }));
  sameFrames(t, w, converted);
  // libyuv (through wrtc) from the same RGB picture, as RGBA.
  const picture = r[20]!.frame.image.data;
  const rgba = new Uint8Array(SMALL.width * SMALL.height * 4);
  for (let p = 0, q = 0; p < picture.length; p += 3, q += 4) { rgba[q] = picture[p]!; rgba[q + 1] = picture[p + 1]!; rgba[q + 2] = picture[p + 2]!; rgba[q + 3] = 255; }
  const libyuv = rgbaToI420(rgba, SMALL.width, SMALL.height).data;
  let worst = 0;
  for (let k = 0; k < libyuv.length; k++) worst = Math.max(worst, Math.abs(libyuv[k]! - w[20]!.frame.image.data[k]!));
  t.true(worst <= 1, `largest difference from libyuv: ${worst}`);
  for (const s of [rgb, workerI420, inlineI420]) s.close();
});

test('JPEG pictures encoded on the render worker are the inline RGB pictures encoded here, byte for byte', async (t) => {
  t.timeout(180_000); // up to 20 s in loaded CI runs (longer beside other work); bounded well above that, and above the 120 s a test may otherwise go without a result
  const rgb = await inline.openSource({ configuration: { ...SMALL, seed: 7 } });
  const workerJpeg = await pooled.openSource({ configuration: { ...SMALL, seed: 7 } });
  const inlineJpeg = await inline.openSource({ configuration: { ...SMALL, seed: 7 } });
  workerJpeg.setImageFormat('jpeg', 80);
  inlineJpeg.setImageFormat('jpeg', 80);
  const [r, w, n] = await Promise.all([script(rgb, 30), script(workerJpeg, 30), script(inlineJpeg, 30)]);
  t.true(w.every((f) => f.frame.image.format === 'jpeg' && f.frame.image.data[0] === 0xff && f.frame.image.data[1] === 0xd8), 'JPEG (SOI marker)');
  sameFrames(t, w, n);
  const encoded = await Promise.all(r.map(async (f) => ({ ...f, frame: { ...f.frame, image: { ...f.frame.image, format: 'jpeg' as const, data: await encodeRgbJpeg(f.frame.image.data, SMALL.width, SMALL.height, 80) } } })));
  sameFrames(t, w, encoded);
  for (const s of [rgb, workerJpeg, inlineJpeg]) s.close();
});

test('a JPEG face session gets its pictures encoded where they are rendered (only JPEG bytes reach this thread)', async (t) => {
  const session = await pooled.openSession({ configuration: SMALL, imageFormat: 'jpeg' }, new RealClock());
  const frames: FaceFrame[] = [];
  await new Promise<void>((resolve) => { const sub = session.frames.subscribe((f) => { frames.push(f); if (frames.length === 3) { sub.unsubscribe(); resolve(); } }); });
  t.true(frames.every((f) => f.image.format === 'jpeg' && f.image.data.length < SMALL.width * SMALL.height * 3 / 4));
  const decoded = await sharp(Buffer.from(frames[2]!.image.data)).metadata();
  t.is(decoded.format, 'jpeg');
  t.is(decoded.width, SMALL.width);
  t.is(decoded.height, SMALL.height);
  session.close();
});

test('a face session asked for i420 emits I420 frames', async (t) => {
  const session = await pooled.openSession({ configuration: SMALL, imageFormat: 'i420' }, new RealClock());
  const frame = await new Promise<FaceFrame>((resolve) => { const sub = session.frames.subscribe((f) => { sub.unsubscribe(); resolve(f); }); });
  t.is(session.imageFormat, 'i420');
  t.is(frame.image.format, 'i420');
  t.is(frame.image.data.length, i420Length(SMALL.width, SMALL.height));
  session.close();
});

test('sessions spread over several workers render at once, each as inline', async (t) => {
  const pool = new FaceRenderPool({ threads: 2, idleShutdownMs: 60_000 });
  t.teardown(() => pool.close());
  const model = new HumanFaceModel('human-presence', { referenceCache: cache, renderPool: pool });
  const reference = new HumanFaceModel('human-presence', { referenceCache: cache, renderThreads: 0 });
  const seeds = [1, 2, 3];
  const sources = await Promise.all(seeds.map((seed) => model.openSource({ configuration: { ...SMALL, seed } })));
  t.is(pool.workerCount, 2);
  t.deepEqual(pool.describe().map((w) => w.sessions).sort(), [1, 2]);
  const threads = new Set(sources.map((s) => (s.raster as WorkerFaceRaster).threadId));
  t.is(threads.size, 2);
  const rendered = await Promise.all(sources.map((s) => script(s, 55)));
  for (const [i, seed] of seeds.entries()) {
    const expected = await script(await reference.openSource({ configuration: { ...SMALL, seed } }), 55);
    sameFrames(t, expected, rendered[i]!);
  }
  for (const s of sources) s.close();
  t.is(pool.sessionCount, 0);
});

test('a worker crash fails only the sessions on it; the next session gets a new worker', async (t) => {
  const pool = new FaceRenderPool({ threads: 2, idleShutdownMs: 60_000 });
  t.teardown(() => pool.close());
  const model = new HumanFaceModel('human-portrait', { referenceCache: cache, renderPool: pool });
  const clock = new RealClock();
  const a = await model.openSession({ configuration: SMALL, imageFormat: 'rgb' }, clock);
  const b = await model.openSession({ configuration: SMALL, imageFormat: 'jpeg' }, clock);
  t.teardown(() => { a.close(); b.close(); });
  const [wa, wb] = pool.describe();
  t.truthy(wa && wb);
  const seen = { a: 0, b: 0 };
  let failure: unknown;
  a.frames.subscribe({ next: () => void seen.a++, error: (err) => { failure = err; } });
  b.frames.subscribe({ next: () => void seen.b++, error: (err) => t.fail(`the other session failed: ${String(err)}`) });
  await until(() => seen.a >= 3 && seen.b >= 3, { timeoutMs: 20_000, intervalMs: 20, what: () => `three frames of each session (a ${seen.a}, b ${seen.b})` });
  // Sessions are placed on an idle worker first: a opened first, on the first worker.
  await pool.killWorker(wa!.threadId);
  await until(() => failure !== undefined, { timeoutMs: 20_000, intervalMs: 20, what: 'the session on the killed worker to error' });
  t.true(failure instanceof FaceRenderError, String(failure));
  t.regex((failure as Error).message, /exited/);
  const bBefore = seen.b;
  await until(() => seen.b >= bBefore + 10, { timeoutMs: 20_000, intervalMs: 20, what: () => `ten more frames of the session on the other worker (${seen.b - bBefore})` });
  t.is(pool.crashes, 1);
  t.is(pool.workerCount, 1);
  const c = await model.openSession({ configuration: SMALL, imageFormat: 'rgb' }, clock);
  t.teardown(() => c.close());
  let cFrames = 0;
  c.frames.subscribe(() => void cFrames++);
  await until(() => cFrames >= 3, { timeoutMs: 20_000, intervalMs: 20, what: () => `three frames of the new session (${cFrames})` });
  t.is(pool.workerCount, 2, 'the dead worker was replaced');
});

test('a reference the worker cannot build a rig from fails that open only; the worker stays up', async (t) => {
  const pool = new FaceRenderPool({ threads: 1, idleShutdownMs: 60_000 });
  t.teardown(() => pool.close());
  const good = await pooled.prepareReference(new Uint8Array(readFileSync(DEFAULT_FACE_IMAGE_PATH)));
  const options = resolveFaceOptions('human-portrait', SMALL);
  // Decoded image bytes that do not match their declared size (a corrupt cache entry, say).
  const err = await t.throwsAsync(pool.open({ width: 512, height: 512, data: new Uint8Array(1000) }, good.landmarks, options));
  t.true(err instanceof FaceRenderError, String(err));
  t.is(pool.crashes, 0);
  t.is(pool.workerCount, 1);
  const model = new HumanFaceModel('human-portrait', { referenceCache: cache, renderPool: pool });
  const source = await model.openSource({ referenceImage: good, configuration: SMALL });
  t.is((await source.nextFrame()).image.data.byteLength, SMALL.width * SMALL.height * 3);
  source.close();
});

test('workers stop after the last session closes, and at once on close(); sessions still open fail', async (t) => {
  const pool = new FaceRenderPool({ threads: 2, idleShutdownMs: 300 });
  const model = new HumanFaceModel('human-portrait', { referenceCache: cache, renderPool: pool });
  const clock = new RealClock();
  const s1 = await model.openSession({ configuration: SMALL, imageFormat: 'rgb' }, clock);
  const s2 = await model.openSession({ configuration: SMALL, imageFormat: 'rgb' }, clock);
  t.is(pool.workerCount, 2);
  await clock.sleep(200);
  s1.close();
  await clock.sleep(600);
  t.is(pool.workerCount, 2, 'a session is still open');
  s2.close();
  t.is(pool.sessionCount, 0);
  await until(() => pool.workerCount === 0, { timeoutMs: 5000, intervalMs: 50, what: () => `the idle workers to stop (${pool.workerCount} left)` });
  t.is(pool.workerCount, 0);

  const s3 = await model.openSession({ configuration: SMALL, imageFormat: 'rgb' }, clock);
  t.is(pool.workerCount, 1);
  let error: unknown;
  let completed = false;
  s3.frames.subscribe({ error: (e) => { error = e; }, complete: () => { completed = true; } });
  await pool.close();
  t.is(pool.workerCount, 0);
  await until(() => error !== undefined || completed, { timeoutMs: 5000, intervalMs: 20, what: 'the session still open to end once the pool closed' });
  t.true(error instanceof FaceRenderError, String(error));
  await t.throwsAsync(model.openSource({ configuration: SMALL }), { instanceOf: FaceRenderError, message: /closed/ });
});

test('the shared pool never keeps a process alive: a script that leaves a source open exits by itself', async (t) => {
  const module = new URL('../../plugins/face/index.ts', import.meta.url).href;
  const code = `
    const { HumanFaceModel } = await import(${JSON.stringify(module)});
    const source = await new HumanFaceModel('human-portrait').openSource({ configuration: { width: 256, height: 144 } });
    const frame = await source.nextFrame();
    console.log(source.raster.threaded, frame.image.data.length);
  `;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
    cwd: fileURLToPath(new URL('../..', import.meta.url)), stdio: ['ignore', 'pipe', 'pipe'], detached: true,
  });
  let out = '', err = '';
  child.stdout.on('data', (c) => (out += c));
  child.stderr.on('data', (c) => (err += c));
  const timer = setTimeout(() => { try { process.kill(-child.pid!, 'SIGKILL'); } catch { /* gone */ } }, 60_000);
  const [code_, signal] = await new Promise<[number | null, string | null]>((resolve) => child.once('exit', (c, s) => resolve([c, s])));
  clearTimeout(timer);
  t.is(signal, null, `killed after 60 s: the process did not exit (${err.trim()})`);
  t.is(code_, 0, err);
  t.is(out.trim(), `true ${256 * 144 * 3}`);
});

test('SVC_FACE_RENDER_THREADS: a count, 0 for inline, refused when not a small integer', (t) => {
  t.is(configuredRenderThreads({}), defaultRenderThreads());
  t.is(defaultRenderThreads(2), 1);
  t.is(defaultRenderThreads(1), 1);
  t.is(defaultRenderThreads(8), 7);
  t.is(configuredRenderThreads({ SVC_FACE_RENDER_THREADS: '3' }), 3);
  t.is(configuredRenderThreads({ SVC_FACE_RENDER_THREADS: '0' }), 0);
  t.is(sharedFaceRenderPool(0), null);
  for (const bad of ['-1', 'two', '1.5', '65']) {
    t.throws(() => configuredRenderThreads({ SVC_FACE_RENDER_THREADS: bad }), { instanceOf: RangeError, message: /SVC_FACE_RENDER_THREADS/ });
  }
});
