/**
 * Avatar bench: render cost, lip-sync offset, emitter jitter, cancel latency, first frame, and
 * a contact sheet + MP4 of a spoken phrase (docs/media/). Run: `npx tsx bench/avatar.ts`.
 * Renders go through the face render pool (`render_threads` workers); with
 * `SVC_FACE_RENDER_THREADS=0` they run inline on the main thread, as before the pool.
 * `render_ms_*` is the time until a frame's picture is back (a worker round trip when
 * threaded); `main_thread_ms_per_frame_720p` is the event-loop time a 720p JPEG session costs
 * per frame (`performance.eventLoopUtilization` over the measured speech).
 */
import { execFileSync } from 'node:child_process';
import { performance as nodePerformance } from 'node:perf_hooks';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import sharp from 'sharp';
import { RealClock } from '../core/clock.ts';
import type { FaceFrame } from '../processors/avatar/face-model.ts';
import { HumanFaceModel } from '../plugins/face/index.ts';
import { pearson, rmsEnvelope, syntheticPhrase } from '../test/face/speech-signal.ts';
import { resolveFaceOptions } from '../plugins/face/configuration.ts';
import { analyseWindow, FaceAnimator } from '../plugins/face/face-animator.ts';
import { motionEnergy, mouthMetrics } from '../plugins/face/face-metrics.ts';
import { FaceRenderer } from '../plugins/face/face-renderer.ts';
import { buildFaceRig } from '../plugins/face/face-rig.ts';
import { DEFAULT_FACE_IMAGE_PATH, FaceReferenceCache } from '../plugins/face/index.ts';
import { readFileSync } from 'node:fs';
import { measureRealtime } from './realtime.ts';

const eventLoopUtilization = nodePerformance.eventLoopUtilization.bind(nodePerformance);
const percentile = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

/**
 * The close-up proxies (#16): the mouth at 720p over a phrase (cavity luminance spread on wide
 * openings, the largest step across a lip-cavity border, teeth area vs opening) and the head /
 * torso motion energy of human-presence against human-portrait on the same speech (640x360).
 */
async function closeup() {
  const cache = new FaceReferenceCache();
  const { reference, rgb } = await cache.prepare(new Uint8Array(readFileSync(DEFAULT_FACE_IMAGE_PATH)));
  const rig = await buildFaceRig(rgb, reference.landmarks, resolveFaceOptions('human-portrait', { width: 1280, height: 720 }));
  const renderer = new FaceRenderer(rig);
  const animator = new FaceAnimator(resolveFaceOptions('human-portrait', {}), 7);
  const phrase = syntheticPhrase(16);
  const rows = [];
  for (let i = 0; i + 640 <= phrase.length; i += 640) {
    const pose = animator.step(analyseWindow(phrase.subarray(i, i + 640)), analyseWindow(phrase.subarray(i + 640, i + 1280)), true);
    rows.push(mouthMetrics(rig, renderer.mesh, renderer.render(pose)));
  }
  const wide = rows.filter((m) => m.gapPx > rig.referenceGaps[1] + 0.12 * rig.mouthWidth).map((m) => m.cavitySpread).sort((a, b) => a - b);
  const energy = async (variant: 'human-portrait' | 'human-presence') => {
    const source = await new HumanFaceModel(variant, { referenceCache: cache, renderThreads: 0 }).openSource({ configuration: { width: 640, height: 360, seed: 5 } });
    source.pushAudio(syntheticPhrase(24));
    source.endTurn();
    const frames: Uint8Array[] = [];
    for (;;) { const f = await source.nextFrame(); frames.push(f.image.data); if (f.final) break; }
    const e = motionEnergy(frames, source.geometry);
    source.close();
    return e;
  };
  const portrait = await energy('human-portrait'), presence = await energy('human-presence');
  return {
    cavitySpreadMedian: wide[wide.length >> 1] ?? 0,
    cavitySpreadMin: wide[0] ?? 0,
    maxBorderStep: Math.max(0, ...rows.map((m) => m.maxBorderStep)),
    teethVsOpeningR: pearson(rows.map((m) => m.gapPx), rows.map((m) => m.teethPixels)),
    headRatio: presence.head / portrait.head,
    torsoRatio: presence.torso / portrait.torso,
  };
}

/**
 * `raw`: a picture as RGB (into reused buffers). `jpeg`: a picture as a JPEG session makes it
 * (rendered and encoded where the source renders: the render worker, or inline), the time until
 * its JPEG bytes are on this thread. 100 frames each after 10 of warm-up, interleaved.
 */
async function renderCost(model: HumanFaceModel, width: number, height: number) {
  const rgb = await model.openSource({ configuration: { width, height } });
  rgb.recycleImages(2);
  const jpegSource = await model.openSource({ configuration: { width, height } });
  jpegSource.setImageFormat('jpeg', 80);
  const phrase = syntheticPhrase(30);
  rgb.pushAudio(phrase);
  jpegSource.pushAudio(phrase);
  const raw: number[] = [], jpeg: number[] = [];
  for (let i = 0; i < 110; i++) {
    const t0 = performance.now();
    await rgb.nextFrame();
    const t1 = performance.now();
    const f = await jpegSource.nextFrame();
    const t2 = performance.now();
    if (f.image.format !== 'jpeg') throw new Error('the JPEG source made no JPEG');
    if (i >= 10) { raw.push(t1 - t0); jpeg.push(t2 - t1); }
  }
  rgb.close();
  jpegSource.close();
  return { raw: mean(raw), jpeg: mean(jpeg) };
}

/** Lag (ms) maximising the correlation of audio envelope and mouth gap; positive = mouth late. */
async function avOffset(model: HumanFaceModel) {
  const source = await model.openSource({ configuration: { width: 1280, height: 720 } });
  const phrase = syntheticPhrase(16);
  source.pushAudio(phrase);
  source.endTurn();
  const env: number[] = [], gap: number[] = [], frames: FaceFrame[] = [];
  for (;;) {
    const f = await source.nextFrame();
    env.push(rmsEnvelope(f.audio)); gap.push(source.lastMouthGapPx); frames.push(f);
    if (f.final) break;
  }
  const corr = (lag: number) => pearson(env.slice(0, env.length - Math.abs(lag)), lag >= 0 ? gap.slice(lag) : gap.slice(0, gap.length + lag).map((_, i) => gap[i]!));
  const lags = [-2, -1, 0, 1, 2];
  const rs = lags.map((l) => (l >= 0 ? corr(l) : pearson(env.slice(-l), gap.slice(0, gap.length + l))));
  const best = rs.indexOf(Math.max(...rs));
  // Parabolic refinement between neighbouring lags.
  let frac = 0;
  if (best > 0 && best < rs.length - 1) {
    const [a, b, c] = [rs[best - 1]!, rs[best]!, rs[best + 1]!];
    frac = (a - c) / (2 * (a - 2 * b + c) || 1);
  }
  const rig = source.geometry;
  const side = Math.round(Math.min(rig.height, 1.9 * rig.faceHeight));
  const face = { left: Math.max(0, Math.round(rig.headCentre.x - side / 2)), top: Math.max(0, Math.round(rig.headCentre.y - side * 0.45)), side };
  return { offsetMs: (lags[best]! + frac) * 40, r: rs[best]!, frames, face };
}

async function realtime(model: HumanFaceModel) {
  const clock = new RealClock();
  const session = await model.openSession({ configuration: { width: 1280, height: 720 } }, clock);
  const lateness: number[] = [];
  let firstSpeechAt = -1, pushedAt = -1, cancelAt = -1, idleAfterCancel = -1, measureFrom = Number.MAX_SAFE_INTEGER;
  session.frames.subscribe((f) => {
    const now = clock.now();
    lateness.push(now - (session.startedAtMs + f.ptsMs));
    if (f.type === 'speech-start' && pushedAt >= 0 && firstSpeechAt < 0) firstSpeechAt = now;
    if (cancelAt >= 0 && idleAfterCancel < 0 && f.type === 'idle') idleAfterCancel = now;
  });
  // The phrases are synthesised before they are needed: generating them is the bench's own work
  // (tens of ms on the main thread) and would show up as the face's lateness.
  const warmup = syntheticPhrase(6);
  const phrase = syntheticPhrase(40);
  await clock.sleep(1000);
  session.pushAudio(warmup); // first speech frames compile the speech path; not measured
  session.endTurn();
  await clock.sleep((warmup.length / 16_000) * 1000 + 800); // played and faded out
  measureFrom = lateness.length;
  const elu0 = eventLoopUtilization();
  pushedAt = clock.now();
  session.pushAudio(phrase);
  await clock.sleep(5000);
  cancelAt = clock.now();
  session.cancel();
  await clock.sleep(1500);
  // Main-thread (event loop) time per frame: what the face session leaves on the loop that
  // also serves the API (the pose, JPEG encode set-up, emission; plus the raster when inline).
  const elu = eventLoopUtilization(elu0);
  const measuredFrames = lateness.length - measureFrom;
  session.close();
  const jitter = lateness.slice(measureFrom).map((l) => Math.abs(l));
  return { jitterP99: percentile(jitter, 99), firstFrameMs: firstSpeechAt - pushedAt, cancelToIdleMs: idleAfterCancel - cancelAt, mainMsPerFrame: elu.active / measuredFrames };
}

async function media(frames: FaceFrame[], face: { left: number; top: number; side: number }) {
  mkdirSync('docs/media', { recursive: true });
  mkdirSync('bench/out', { recursive: true });
  const speech = frames.filter((f) => f.type !== 'idle');
  const picks = Array.from({ length: 16 }, (_, i) => speech[Math.floor((i * speech.length) / 16)]!);
  const tw = 240, th = 240;
  const tiles = await Promise.all(picks.map(async (f, i) => ({
    input: await sharp(f.image.data, { raw: { width: f.image.width, height: f.image.height, channels: 3 } })
      .extract({ left: face.left, top: face.top, width: Math.min(face.side, f.image.width - face.left), height: Math.min(face.side, f.image.height - face.top) })
      .resize(tw, th).png().toBuffer(),
    left: (i % 4) * tw, top: Math.floor(i / 4) * th,
  })));
  await sharp({ create: { width: tw * 4, height: th * 4, channels: 3, background: '#000' } }).composite(tiles).png({ palette: true, quality: 90 }).toFile('docs/media/avatar-contact-sheet.png');
  if (!existsSync('/usr/bin/ffmpeg')) return false;
  const raw = Buffer.concat(frames.map((f) => Buffer.from(f.image.data)));
  writeFileSync('bench/out/avatar.rgb', raw);
  const pcm = new Int16Array(frames.length * 640);
  frames.forEach((f, i) => pcm.set(f.audio, i * 640));
  writeFileSync('bench/out/avatar.pcm', Buffer.from(pcm.buffer));
  const { width, height } = frames[0]!.image;
  execFileSync('/usr/bin/ffmpeg', ['-y', '-loglevel', 'error', '-f', 'rawvideo', '-pix_fmt', 'rgb24', '-s', `${width}x${height}`, '-r', '25', '-i', 'bench/out/avatar.rgb',
    '-f', 's16le', '-ar', '16000', '-ac', '1', '-i', 'bench/out/avatar.pcm', '-c:v', 'libx264', '-pix_fmt', 'yuv420p', '-crf', '26', '-c:a', 'aac', '-shortest', 'docs/media/avatar-phrase.mp4']);
  return true;
}

export async function run(): Promise<Record<string, unknown>> {
  const model = new HumanFaceModel('human-portrait');
  const pool = model.renderPool();
  // The playback clock first, in a fresh heap: the lip-sync run below keeps every 720p frame
  // (for the MP4), and the garbage collection that causes would be charged to the clock.
  const rt = await realtime(model);
  const hd = await renderCost(model, 1280, 720);
  const hdPresence = await renderCost(new HumanFaceModel('human-presence'), 1280, 720);
  const sd = await renderCost(model, 640, 360);
  const av = await avOffset(model);
  const remote = await measureRealtime(3);
  const wrote = await media(av.frames, av.face);
  const close = await closeup();
  const result = {
    bench: 'avatar',
    render_threads: pool?.threads ?? 0,
    render_ms_720p: +hd.raw.toFixed(2),
    render_jpeg_ms_720p: +hd.jpeg.toFixed(2),
    render_ms_720p_presence: +hdPresence.raw.toFixed(2),
    render_jpeg_ms_720p_presence: +hdPresence.jpeg.toFixed(2),
    render_ms_360p: +sd.raw.toFixed(2),
    render_jpeg_ms_360p: +sd.jpeg.toFixed(2),
    av_offset_ms: +av.offsetMs.toFixed(1),
    av_correlation: +av.r.toFixed(3),
    frame_jitter_p99_ms: +rt.jitterP99.toFixed(2),
    main_thread_ms_per_frame_720p: +rt.mainMsPerFrame.toFixed(2),
    first_frame_ms_inprocess: +rt.firstFrameMs.toFixed(1),
    first_frame_ms_realtime: +percentile(remote.firstFrame, 50).toFixed(1),
    cancel_to_idle_ms: +rt.cancelToIdleMs.toFixed(1),
    sessions_per_core_720p25: +(1000 / hd.jpeg / 25).toFixed(2),
    mp4_written: wrote,
    mouth_cavity_luma_spread_median: +close.cavitySpreadMedian.toFixed(1),
    mouth_cavity_luma_spread_min: +close.cavitySpreadMin.toFixed(1),
    mouth_border_max_step_720p: +close.maxBorderStep.toFixed(1),
    mouth_teeth_area_vs_opening_r: +close.teethVsOpeningR.toFixed(3),
    presence_vs_portrait_head_motion: +close.headRatio.toFixed(2),
    presence_vs_portrait_torso_motion: +close.torsoRatio.toFixed(2),
  };
  console.table(Object.entries(result).filter(([k]) => k !== 'bench').map(([figure, value]) => ({ figure, value })));
  console.log(JSON.stringify(result));
  return result;
}

if (import.meta.url === `file://${process.argv[1]}`) await run();
