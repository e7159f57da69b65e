/**
 * The articulation metrics (issue #29) measure what they claim, on rendered pictures of the
 * default face: each is checked against poses with a known answer, and against a control that
 * must make it fail (teeth painted between closed lips, a zigzag track).
 */
import test from 'ava';
import { readFileSync } from 'node:fs';
import { resolveFaceOptions } from '../../plugins/face/configuration.ts';
import { articulationMetrics, flickerRate, restCornerHeight } from '../../plugins/face/face-metrics.ts';
import { REST_POSE, type FacePose } from '../../plugins/face/face-pose.ts';
import { FaceRenderer } from '../../plugins/face/face-renderer.ts';
import { buildFaceRig } from '../../plugins/face/face-rig.ts';
import { DEFAULT_FACE_IMAGE_PATH, FaceReferenceCache } from '../../plugins/face/index.ts';

const cache = new FaceReferenceCache();

async function renderer(width = 1280, height = 720): Promise<FaceRenderer> {
  const { reference, rgb } = await cache.prepare(new Uint8Array(readFileSync(DEFAULT_FACE_IMAGE_PATH)));
  return new FaceRenderer(await buildFaceRig(rgb, reference.landmarks, resolveFaceOptions('human-portrait', { width, height })));
}

const measure = (r: FaceRenderer, pose: Partial<FacePose>) => {
  const image = r.render({ ...REST_POSE, ...pose });
  return { m: articulationMetrics(r.rig, r.mesh, image), image };
};

test('at rest the metrics read the reference: its gap, full width and height, its smile, its teeth', async (t) => {
  const r = await renderer();
  const { m } = measure(r, {});
  t.true(Math.abs(m.gapPx - r.rig.referenceGaps[1]) < 0.01);
  t.true(Math.abs(m.width - 1) < 1e-6 && Math.abs(m.height - 1) < 1e-6);
  // The astronaut smiles: corners about a tenth of the mouth width above the lip line.
  t.true(m.cornerHeight > 0.06, `corner height ${m.cornerHeight}`);
  t.is(m.cornerHeight, restCornerHeight(r.rig));
  t.true(m.teethPixels > 150, `${m.teethPixels} teeth pixels in a smile that shows its upper teeth`);
  t.true(m.visibleGapPx > 0.5 * r.rig.referenceGaps[1], `visible gap ${m.visibleGapPx}`);
});

test('opening, narrowing and spreading move the figures the right way', async (t) => {
  const r = await renderer();
  const rest = measure(r, {}).m;
  const open = measure(r, { speaking: 1, jawOpen: 0.35 }).m;
  const round = measure(r, { speaking: 1, jawOpen: 0.1, mouthWidth: -1 }).m;
  const spread = measure(r, { speaking: 1, jawOpen: 0.1, mouthWidth: 1 }).m;
  t.true(Math.abs(open.gap - 0.35) < 0.01, `gap ${open.gap}`);
  t.true(open.height > 1.3 && open.visibleGapPx > 2 * rest.visibleGapPx);
  t.true(round.width < 0.9 && spread.width > 1.1, `round ${round.width}, spread ${spread.width}`);
});

test('the teeth figure is read from the picture: teeth painted between closed lips are counted', async (t) => {
  const r = await renderer();
  const { m: shut, image } = measure(r, { speaking: 1, jawOpen: 0 });
  t.true(Math.abs(shut.gapPx) < 0.13, `gap ${shut.gapPx}`); // displacements are drawn in 1/8 px steps
  // Control: a band of the reference's teeth colour across the closed lip line.
  const mesh = r.mesh, W = r.rig.width;
  const y = Math.round(mesh[2 * 62 + 1]!);
  for (let x = Math.round(mesh[2 * 61]!); x <= Math.round(mesh[2 * 63]!); x++) {
    for (const dy of [-1, 0, 1]) image.set([246, 236, 226], ((y + dy) * W + x) * 3);
  }
  const painted = articulationMetrics(r.rig, mesh, image);
  t.true(painted.teethPixels >= shut.teethPixels + 40, `${shut.teethPixels} -> ${painted.teethPixels}`);
});

test('flicker counts zigzags only: jitter on a syllable rhythm is, the rhythm itself is not', (t) => {
  // Syllables every 360 ms.
  const syllables = Array.from({ length: 100 }, (_, i) => 0.2 + 0.15 * Math.sin((2 * Math.PI * i) / 9));
  t.is(flickerRate(syllables, 0.01), 0);
  const jitter = syllables.map((v, i) => v + (i % 2 ? 0.06 : -0.06));
  t.true(flickerRate(jitter, 0.01) > 10, `${flickerRate(jitter, 0.01)} zigzags per second`);
  // Below the step size, noise is not flicker.
  t.is(flickerRate(syllables.map((v, i) => v + (i % 2 ? 0.002 : -0.002)), 0.01), 0);
});
