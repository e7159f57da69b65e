/**
 * The face up close (#16): the mouth's measured proxies at 720p across a spoken phrase, colours
 * taken from the reference, human-presence's motion against human-portrait's on the same
 * speech, an idle that does not loop within 30 s, and a mesh that never folds.
 */
import test from 'ava';
import { readFileSync } from 'node:fs';
import sharp from 'sharp';
import { resolveFaceOptions } from '../../plugins/face/configuration.ts';
import { analyseWindow, FaceAnimator } from '../../plugins/face/face-animator.ts';
import { foldedTriangles, motionEnergy, mouthMetrics } from '../../plugins/face/face-metrics.ts';
import { deformMesh, type FacePose } from '../../plugins/face/face-pose.ts';
import { FaceRenderer } from '../../plugins/face/face-renderer.ts';
import { buildFaceRig, type FaceRig } from '../../plugins/face/face-rig.ts';
import { mouthPalette } from '../../plugins/face/mouth-interior.ts';
import { DEFAULT_FACE_IMAGE_PATH, FaceReferenceCache, HumanFaceModel } from '../../plugins/face/index.ts';
import { pearson, syntheticPhrase } from './speech-signal.ts';

const cache = new FaceReferenceCache();
const imageBytes = new Uint8Array(readFileSync(DEFAULT_FACE_IMAGE_PATH));

async function rig720(variant: 'human-portrait' | 'human-presence' = 'human-portrait', rgbOverride?: { width: number; height: number; data: Uint8Array }): Promise<FaceRig> {
  const { reference, rgb } = await cache.prepare(imageBytes);
  return buildFaceRig(rgbOverride ?? rgb, reference.landmarks, resolveFaceOptions(variant, { width: 1280, height: 720 }));
}

/** Poses of the animator over `phrase` (speaking), one per 40 ms window. */
function speechPoses(variant: 'human-portrait' | 'human-presence', phrase: Int16Array, seed = 7, configuration: Record<string, unknown> = {}): FacePose[] {
  const animator = new FaceAnimator(resolveFaceOptions(variant, configuration), seed);
  const poses: FacePose[] = [];
  for (let i = 0; i + 640 <= phrase.length; i += 640) {
    poses.push(animator.step(analyseWindow(phrase.subarray(i, i + 640)), analyseWindow(phrase.subarray(i + 640, i + 1280)), true));
  }
  return poses;
}

test('720p mouth across a phrase: the cavity is shaded, its lip borders are soft, the teeth follow the opening', async (t) => {
  const rig = await rig720();
  const renderer = new FaceRenderer(rig);
  const poses = speechPoses('human-portrait', syntheticPhrase(16));
  const refGap = rig.referenceGaps[1];
  const rows = poses.map((pose) => {
    const image = renderer.render(pose);
    return mouthMetrics(rig, renderer.mesh, image);
  });
  const wide = rows.filter((m) => m.gapPx > refGap + 0.12 * rig.mouthWidth);
  t.true(wide.length >= 5, `only ${wide.length} wide openings in the phrase`);
  // Not one flat colour: the back of the cavity is darker than its lit walls and the tongue.
  const spreads = wide.map((m) => m.cavitySpread);
  t.log(`cavity luminance spread (p90 - p10) on ${wide.length} wide openings: min ${Math.min(...spreads).toFixed(1)}, max ${Math.max(...spreads).toFixed(1)}`);
  t.true(wide.every((m) => m.cavityPixels >= 20 && m.cavitySpread >= 25), `spreads ${spreads.map((s) => s.toFixed(0)).join(' ')}`);
  // Soft borders: the lip-to-cavity contrast (~150 luminance levels on this face) spread over pixels.
  const bordered = rows.filter((m) => m.borderColumns > 0);
  const maxStep = Math.max(...bordered.map((m) => m.maxBorderStep));
  t.log(`largest luminance step across a lip-cavity border: ${maxStep.toFixed(1)} over ${bordered.length} frames`);
  t.true(bordered.length >= 5);
  t.true(maxStep <= 95, `a border step of ${maxStep.toFixed(1)}`);
  // Teeth: hidden with the lips together, more of them as the mouth opens.
  const r = pearson(rows.map((m) => m.gapPx), rows.map((m) => m.teethPixels));
  t.log(`teeth area vs opening: r = ${r.toFixed(3)}`);
  t.true(r > 0.6);
  // Lips together (a bilabial while speaking): no teeth.
  const shut = renderer.render({ ...poses[0]!, jawOpen: 0, speaking: 1 });
  t.true(mouthMetrics(rig, renderer.mesh, shut).teethPixels < 10);
});

test('the border metric sees a hard edge: a flat cavity painted without anti-aliasing measures far above the bound', async (t) => {
  // The control for the test above: the same measurement on a deliberately aliased mouth.
  const rig = await rig720();
  const renderer = new FaceRenderer(rig);
  const pose = speechPoses('human-portrait', syntheticPhrase(16)).reduce((a, b) => (b.jawOpen > a.jawOpen ? b : a));
  const image = renderer.render(pose);
  const m = renderer.mesh;
  const polyY = (idx: number[], x: number) => {
    for (let k = 0; k < idx.length - 1; k++) {
      const xa = m[2 * idx[k]!]!, xb = m[2 * idx[k + 1]!]!;
      if (x >= xa && x <= xb && xb > xa) return m[2 * idx[k]! + 1]! + (m[2 * idx[k + 1]! + 1]! - m[2 * idx[k]! + 1]!) * ((x - xa) / (xb - xa));
    }
    return null;
  };
  for (let x = Math.ceil(m[120]!); x < m[128]!; x++) {
    const yu = polyY([60, 61, 62, 63, 64], x + 0.5), yl = polyY([60, 67, 66, 65, 64], x + 0.5);
    if (yu === null || yl === null) continue;
    for (let y = Math.ceil(yu - 0.5); y <= Math.floor(yl - 0.5); y++) image.set([40, 12, 16], (y * rig.width + x) * 3);
  }
  const hard = mouthMetrics(rig, m, image);
  t.log(`aliased flat cavity: border step ${hard.maxBorderStep.toFixed(1)}, spread ${hard.cavitySpread.toFixed(1)}`);
  t.true(hard.borderColumns > 0);
  t.true(hard.maxBorderStep > 120);
  t.true(hard.cavitySpread < 5);
});

test('a reference with closed lips gets synthetic teeth on wide openings, and a shaded cavity', async (t) => {
  // The default photo with its inner-lip landmarks closed onto one line: the rig sees no teeth.
  const { reference, rgb } = await cache.prepare(imageBytes);
  const points = [...reference.landmarks.points];
  for (const [u, l] of [[61, 67], [62, 66], [63, 65]] as const) {
    const m = (points[2 * u + 1]! + points[2 * l + 1]!) / 2;
    points[2 * u + 1] = m; points[2 * l + 1] = m;
  }
  const rig = await buildFaceRig(rgb, { ...reference.landmarks, points }, resolveFaceOptions('human-portrait', { width: 1280, height: 720 }));
  t.true(mouthPalette(rig).synthetic);
  const renderer = new FaceRenderer(rig);
  const at = (jawOpen: number) => {
    const image = renderer.render({ ...speechPoses('human-portrait', syntheticPhrase(1))[0]!, jawOpen, speaking: 1, mouthWidth: 0 });
    // No pixel of the mouth box is pure black (a NaN in the shading would write 0).
    const x0 = Math.floor(rig.mouthCentre.x - rig.mouthWidth / 2), y0 = Math.floor(rig.mouthCentre.y - rig.mouthWidth / 2);
    let black = 0;
    for (let y = y0; y < y0 + rig.mouthWidth; y++) for (let x = x0; x < x0 + rig.mouthWidth; x++) {
      const o = (y * rig.width + x) * 3;
      if (image[o] === 0 && image[o + 1] === 0 && image[o + 2] === 0) black++;
    }
    return { ...mouthMetrics(rig, renderer.mesh, image), black };
  };
  const slight = at(0.05), wide = at(0.35);
  t.log(`slight: ${JSON.stringify(slight)}; wide: ${JSON.stringify(wide)}`);
  t.is(slight.black + wide.black, 0);
  t.true(slight.teethPixels < 10, 'a slight opening shows no teeth yet');
  t.true(wide.teethPixels > 100, 'a wide one does');
  t.true(wide.cavitySpread >= 25);
  t.true(wide.maxBorderStep <= 95);
});

test('mouth colours come from the reference: a recoloured photo gives a recoloured cavity and tongue', async (t) => {
  const { rgb } = await cache.prepare(imageBytes);
  const shifted = await sharp(rgb.data, { raw: { width: rgb.width, height: rgb.height, channels: 3 } }).modulate({ hue: 150 }).raw().toBuffer();
  const original = mouthPalette(await rig720());
  const recoloured = mouthPalette(await rig720('human-portrait', { width: rgb.width, height: rgb.height, data: new Uint8Array(shifted) }));
  const dominant = (c: readonly number[]) => c.indexOf(Math.max(...c));
  t.log(`lip ${original.lip.map(Math.round)} -> ${recoloured.lip.map(Math.round)}; cavity ${original.cavityNear.map(Math.round)} -> ${recoloured.cavityNear.map(Math.round)}`);
  t.is(dominant(original.cavityNear), 0, 'a red cavity for a red-lipped photo');
  t.not(dominant(recoloured.cavityNear), 0, 'the cavity follows the photo, not a fixed red');
  t.is(dominant(recoloured.cavityNear), dominant(recoloured.lip));
  t.is(dominant(recoloured.tongue), dominant(recoloured.lip));
  // The teeth are measured in the photo (the astronaut shows hers): brighter than the lips.
  t.false(original.synthetic);
  const luma = (c: readonly number[]) => 0.299 * c[0]! + 0.587 * c[1]! + 0.114 * c[2]!;
  t.true(luma(original.teeth) > luma(original.lip) + 15);
});

test('human-presence moves head and torso at least twice as much as human-portrait on the same speech', async (t) => {
  const phrase = syntheticPhrase(24);
  const run = async (variant: 'human-portrait' | 'human-presence') => {
    const source = await new HumanFaceModel(variant, { referenceCache: cache, renderThreads: 0 }).openSource({ configuration: { width: 640, height: 360, seed: 5 } });
    source.pushAudio(phrase);
    source.endTurn();
    const frames: Uint8Array[] = [];
    for (;;) {
      const f = await source.nextFrame();
      frames.push(f.image.data);
      if (f.final) break;
    }
    const energy = motionEnergy(frames, source.geometry);
    source.close();
    return energy;
  };
  const portrait = await run('human-portrait');
  const presence = await run('human-presence');
  t.log(`head ${portrait.head.toFixed(3)} -> ${presence.head.toFixed(3)} (x${(presence.head / portrait.head).toFixed(2)}), torso ${portrait.torso.toFixed(3)} -> ${presence.torso.toFixed(3)} (x${(presence.torso / portrait.torso).toFixed(2)})`);
  t.true(portrait.head > 0 && portrait.torso > 0, 'portrait moves too');
  t.true(presence.head >= 2 * portrait.head);
  t.true(presence.torso >= 2 * portrait.torso);
});

test('human-presence turns its head and looks away at phrase onsets (prosody), human-portrait does not', (t) => {
  // Two phrases 600 ms apart; across 8 seeds, how far the head turns and the gaze moves in the
  // 0.6 s after the second phrase starts.
  const a = syntheticPhrase(6), b = syntheticPhrase(6);
  const gap = 16_000 * 0.6;
  const pcm = new Int16Array(a.length + gap + b.length);
  pcm.set(a, 0); pcm.set(b, a.length + gap);
  const onset = Math.floor((a.length + gap) / 640);
  const response = (variant: 'human-portrait' | 'human-presence') => {
    let turn = 0, gaze = 0;
    for (let seed = 1; seed <= 8; seed++) {
      const poses = speechPoses(variant, pcm, seed);
      turn += Math.abs(poses[onset + 15]!.yaw - poses[onset - 1]!.yaw);
      gaze += Math.max(...poses.slice(onset, onset + 15).map((p) => Math.abs(p.gazeX)));
    }
    return { turn: turn / 8, gaze: gaze / 8 };
  };
  const portrait = response('human-portrait'), presence = response('human-presence');
  t.log(`mean head turn over the onset ${portrait.turn.toFixed(4)} -> ${presence.turn.toFixed(4)} rad; largest gaze shift ${portrait.gaze.toFixed(2)} -> ${presence.gaze.toFixed(2)}`);
  t.true(presence.turn > 0.03 && presence.turn > 3 * portrait.turn);
  t.true(presence.gaze > 0.25 && presence.gaze > 2 * portrait.gaze);
});

test('human-presence idle does not loop within 30 s', (t) => {
  const animator = new FaceAnimator(resolveFaceOptions('human-presence', {}), 3);
  const keys = ['yaw', 'pitch', 'roll', 'headX', 'shoulderSway', 'gazeX', 'gazeY'] as const;
  const track = Array.from({ length: 750 }, () => animator.step(undefined, undefined, false));
  // Each channel normalised by its own spread, so a still channel cannot hide a loop.
  const series = keys.map((k) => {
    const xs = track.map((p) => p[k]);
    const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
    const sd = Math.sqrt(xs.reduce((a, b) => a + (b - mean) ** 2, 0) / xs.length);
    t.true(sd > 0, `${k} never moves`);
    return xs.map((x) => (x - mean) / sd);
  });
  // For every lag from 2 s to 25 s: how far the motion after the lag is from the motion before
  // it, over a 5 s window at every start. A loop would bring that distance near 0 somewhere.
  let closest = Infinity, at = 0;
  for (let lag = 50; lag <= 625; lag++) {
    for (let start = 0; start + lag + 125 <= 750; start += 25) {
      let d = 0;
      for (const s of series) for (let i = start; i < start + 125; i++) d += (s[i]! - s[i + lag]!) ** 2;
      d = Math.sqrt(d / (125 * series.length));
      if (d < closest) { closest = d; at = lag; }
    }
  }
  t.log(`closest return over 5 s windows: ${closest.toFixed(3)} (in units of each channel's spread) at a lag of ${(at * 0.04).toFixed(2)} s`);
  t.true(closest > 0.35);
});

test('the warped mesh never folds (no draw-order edges) under the most expressive presence', async (t) => {
  const rig = await rig720('human-presence');
  const mesh = new Float32Array(rig.rest.length);
  let folded = 0, frames = 0;
  for (const configuration of [{}, { expressiveness: 2, motion_scale: 2, breathing_scale: 2 }]) {
    const speech = speechPoses('human-presence', syntheticPhrase(30), 9, configuration);
    const animator = new FaceAnimator(resolveFaceOptions('human-presence', configuration), 9);
    const idle = Array.from({ length: 500 }, () => animator.step(undefined, undefined, false));
    for (const pose of [...speech, ...idle]) {
      deformMesh(rig, pose, mesh);
      folded += foldedTriangles(rig, mesh);
      frames++;
    }
  }
  t.log(`${frames} poses checked`);
  t.is(folded, 0);
});
