/**
 * The mesh warp's WebAssembly kernel: its checked-in binary is what its source compiles to, it
 * writes the same bytes as the JavaScript reference on a real rig and speech, and the reference
 * itself samples as a bilinear warp must (exact on whole-pixel shifts, rounded means between).
 */
import test from 'ava';
import { readFileSync } from 'node:fs';
import { compileWat, watSources } from '../../scripts/build-wasm.ts';
import { DEFAULT_FACE_IMAGE_PATH, FaceReferenceCache } from '../../plugins/face/index.ts';
import { resolveFaceOptions } from '../../plugins/face/configuration.ts';
import { buildFaceRig } from '../../plugins/face/face-rig.ts';
import { analyseWindow, FaceAnimator } from '../../plugins/face/face-animator.ts';
import { deformMesh, REST_POSE } from '../../plugins/face/face-pose.ts';
import { FaceRenderer } from '../../plugins/face/face-renderer.ts';
import { MeshWarper, warpTriangle } from '../../plugins/face/mesh-rasterizer.ts';
import { rgbToI420 } from '../../plugins/face/i420.ts';
import { syntheticPhrase } from './speech-signal.ts';

test('every checked-in kernel binary is what its source compiles to (npm run build:wasm)', async (t) => {
  const sources = watSources();
  t.true(sources.some((p) => p.endsWith('plugins/face/warp-kernel.wat')));
  for (const path of sources) {
    const built = await compileWat(path);
    const checkedIn = new Uint8Array(readFileSync(path.replace(/\.wat$/, '.wasm')));
    t.deepEqual(Buffer.from(checkedIn), Buffer.from(built), `${path} is stale: run npm run build:wasm`);
  }
});

test('the kernel warps a talking, moving face to the same bytes as the JavaScript reference', async (t) => {
  const cache = new FaceReferenceCache();
  const { reference, rgb } = await cache.prepare(new Uint8Array(readFileSync(DEFAULT_FACE_IMAGE_PATH)));
  const options = resolveFaceOptions('human-presence', { width: 640, height: 360 });
  const rig = await buildFaceRig(rgb, reference.landmarks, options);
  const wasm = new MeshWarper(rig.base, rig.width, rig.height);
  const js = new MeshWarper(rig.base, rig.width, rig.height, { engine: 'js' });
  t.is(wasm.engine, 'wasm', 'Node 20 runs the WebAssembly SIMD kernel');
  t.is(js.engine, 'js');
  const animator = new FaceAnimator(options, 3);
  const phrase = syntheticPhrase(4);
  const mesh = new Float32Array(rig.rest.length);
  let frames = 0, changed = 0;
  for (let i = 0; i + 1280 <= phrase.length; i += 640 * 5) {
    deformMesh(rig, animator.step(analyseWindow(phrase.subarray(i, i + 640)), analyseWindow(phrase.subarray(i + 640, i + 1280)), true), mesh);
    const drawn = wasm.warp(rig.rest, mesh, rig.triangles);
    t.is(js.warp(rig.rest, mesh, rig.triangles), drawn);
    t.true(Buffer.from(wasm.canvas).equals(Buffer.from(js.canvas)), `frame ${frames}: the kernel and the reference differ`);
    t.true(Buffer.from(wasm.toI420()).equals(Buffer.from(rgbToI420(js.canvas, rig.width, rig.height))), `frame ${frames}: I420 differs`);
    for (let p = 0; p < rig.base.length; p += 3) if (wasm.canvas[p] !== rig.base[p]) { changed++; break; }
    frames++;
  }
  t.true(frames >= 4);
  t.true(changed >= frames - 1, 'the poses moved the picture (the comparison is not of two copies of the base)');
});

test('the incremental warp (only changed triangles redrawn) gives exactly the bytes of a full redraw, at rest again too', async (t) => {
  const cache = new FaceReferenceCache();
  const { reference, rgb } = await cache.prepare(new Uint8Array(readFileSync(DEFAULT_FACE_IMAGE_PATH)));
  const options = resolveFaceOptions('human-presence', { width: 320, height: 180 });
  const rig = await buildFaceRig(rgb, reference.landmarks, options);
  const renderer = new FaceRenderer(rig);
  const animator = new FaceAnimator(options, 5);
  const phrase = syntheticPhrase(4);
  let redrawn = 0, total = 0;
  const poses = [];
  for (let i = 0; i + 1280 <= phrase.length; i += 640) poses.push(animator.step(analyseWindow(phrase.subarray(i, i + 640)), analyseWindow(phrase.subarray(i + 640, i + 1280)), true));
  for (let i = 0; i < 40; i++) poses.push(animator.step(undefined, undefined, false));
  poses.push(REST_POSE, REST_POSE);
  for (const [n, pose] of poses.entries()) {
    const incremental = renderer.render(pose);
    const full = new FaceRenderer(rig).render(pose); // a fresh renderer warps from the texture
    if (!Buffer.from(incremental).equals(Buffer.from(full))) return t.fail(`frame ${n} differs from a full redraw`);
  }
  // And it does redraw less: count triangles drawn on the idle tail.
  const warper = new MeshWarper(rig.base, rig.width, rig.height);
  const mesh = new Float32Array(rig.rest.length);
  for (const pose of poses.slice(-40)) {
    deformMesh(rig, pose, mesh);
    for (let i = 0; i < mesh.length; i++) mesh[i] = rig.rest[i]! + Math.round((mesh[i]! - rig.rest[i]!) * 8) / 8;
    redrawn += warper.warp(rig.rest, mesh, rig.triangles);
    total += rig.triangles.length / 3;
  }
  t.log(`idle: ${redrawn} of ${total} triangle draws`);
  t.true(redrawn < 0.8 * total);
  t.pass();
});

test('the reference warp: a whole-pixel shift copies pixels exactly, a half-pixel shift gives rounded means', (t) => {
  const w = 16, h = 12;
  const src = new Uint8Array(w * h * 3);
  for (let i = 0; i < src.length; i++) src[i] = (i * 37 + (i >> 3) * 11) & 255;
  const px = (img: Uint8Array, x: number, y: number) => [...img.subarray((y * w + x) * 3, (y * w + x) * 3 + 3)];
  // The destination square (4..10, 3..9) maps to the source square one pixel right and down.
  const whole = new Uint8Array(src.length);
  for (const [a, b, c] of [[[4, 3], [10, 3], [10, 9]], [[4, 3], [10, 9], [4, 9]]] as const) {
    warpTriangle(src, whole, w, h, a[0] + 1, a[1] + 1, b[0] + 1, b[1] + 1, c[0] + 1, c[1] + 1, a[0], a[1], b[0], b[1], c[0], c[1]);
  }
  for (let y = 3; y < 9; y++) for (let x = 4; x < 10; x++) t.deepEqual(px(whole, x, y), px(src, x + 1, y + 1), `(${x},${y})`);
  t.deepEqual(px(whole, 3, 3), [0, 0, 0], 'outside the triangles nothing is written');
  // Half a pixel to the right: each channel the rounded mean of two horizontal neighbours.
  const half = new Uint8Array(src.length);
  for (const [a, b, c] of [[[4, 3], [10, 3], [10, 9]], [[4, 3], [10, 9], [4, 9]]] as const) {
    warpTriangle(src, half, w, h, a[0] + 0.5, a[1], b[0] + 0.5, b[1], c[0] + 0.5, c[1], a[0], a[1], b[0], b[1], c[0], c[1]);
  }
  for (let y = 3; y < 9; y++) for (let x = 4; x < 10; x++) {
    const l = px(src, x, y), r = px(src, x + 1, y);
    t.deepEqual(px(half, x, y), l.map((v, k) => (v * 128 + r[k]! * 128 + 128) >> 8), `(${x},${y})`);
  }
});

test('the kernel converts to I420 bit for bit as i420.ts does, at widths that are not a multiple of 8 too', (t) => {
  for (const [w, h] of [[70, 20], [16, 2], [2, 2], [38, 6]] as const) {
    const rgb = new Uint8Array(w * h * 3);
    // Extremes and mid values in every channel, so chroma goes negative and saturates.
    for (let i = 0; i < rgb.length; i++) rgb[i] = [0, 255, 17, 128, 240, 3][(i * 7 + (i >> 2)) % 6]!;
    const warper = new MeshWarper(rgb, w, h);
    t.is(warper.engine, 'wasm');
    warper.canvas.set(rgb);
    const out = new Uint8Array(w * h * 2).fill(9);
    const yuv = warper.toI420(out);
    t.is(yuv.buffer, out.buffer, 'written into the given buffer');
    t.true(Buffer.from(yuv).equals(Buffer.from(rgbToI420(rgb, w, h))), `${w}x${h}`);
    t.is(out[yuv.length], 9, 'nothing written past the picture');
  }
});
