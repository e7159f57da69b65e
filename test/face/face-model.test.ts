import test from 'ava';
import { readFileSync } from 'node:fs';
import AjvModule from 'ajv';
import { VirtualClock } from '../../core/clock.ts';
import { Registry } from '../../core/registry.ts';
import type { FaceFrame, FaceModel } from '../../processors/avatar/face-model.ts';
import { FaceModelError } from '../../processors/avatar/face-model.ts';
import { DEFAULT_FACE_IMAGE_PATH, FaceReferenceCache, facePlugin, HumanFaceModel } from '../../plugins/face/index.ts';
import { pearson, rmsEnvelope, syntheticPhrase } from './speech-signal.ts';

const SMALL = { width: 320, height: 180 };
const cache = new FaceReferenceCache();
const portrait = new HumanFaceModel('human-portrait', { referenceCache: cache });

test('the face plugin registers both variants with ajv-compilable configuration schemas', (t) => {
  const registry = new Registry().use(facePlugin);
  const listed = registry.list('face');
  t.deepEqual(listed.map((e) => e.slug), ['human-portrait', 'human-presence']);
  t.deepEqual(listed.map((e) => (e.descriptor as any).model_variant_id), ['svc/human-portrait/v1', 'svc/human-presence/v1']);
  const Ajv = (AjvModule as any).default ?? AjvModule;
  for (const e of listed) {
    const validate = new Ajv({ strict: true }).compile((e.descriptor as any).configuration_schema);
    t.true(validate({ width: 640, height: 360, background: '#000000' }));
    t.false(validate({ width: 4000 }));
  }
  const model = registry.create<FaceModel>('face', 'human-presence', {});
  t.is(model.descriptor.model_id, 'svc/human-presence');
});

test('invalid configurations are refused with every problem listed', async (t) => {
  const err = t.throws(() => portrait.validateConfiguration({ width: 1920, background: 'red', extra: 1 }), { instanceOf: FaceModelError });
  t.is(err!.code, 'invalid_configuration');
  t.regex(err!.message, /width/);
  t.regex(err!.message, /background/);
  t.regex(err!.message, /extra/);
  await t.throwsAsync(portrait.openSource({ configuration: { height: 1080 } }), { instanceOf: FaceModelError });
  await t.throwsAsync(portrait.openSource({ referenceImage: new Uint8Array([1, 2, 3]) }), { message: /could not be decoded/ });
});

test('frames come at exactly 25 fps with consecutive pts and 640 samples of audio', async (t) => {
  const clock = new VirtualClock();
  const session = await portrait.openSession({ configuration: SMALL, imageFormat: 'rgb' }, clock);
  const frames: Array<{ f: FaceFrame; at: number }> = [];
  session.frames.subscribe((f) => frames.push({ f, at: clock.now() }));
  // Frame 0 is due one render lead after the session opened (its render starts at once).
  t.true(session.startedAtMs > clock.now() && session.startedAtMs - clock.now() <= 40);
  await clock.advance(session.startedAtMs - clock.now() + 2000);
  t.true(frames.length >= 50 && frames.length <= 51);
  frames.forEach(({ f, at }, i) => {
    t.is(f.index, i);
    t.is(f.ptsMs, i * 40);
    t.is(at, session.startedAtMs + i * 40);
    t.is(f.audio.length, 640);
    t.is(f.image.data.length, 320 * 180 * 3);
  });
  session.close();
  t.is(clock.pendingTimers(), 0);
});

test('idle frames never freeze: consecutive idle frames differ in every 3 s window', async (t) => {
  const source = await portrait.openSource({ configuration: SMALL });
  let prev: Uint8Array | undefined;
  const changed: boolean[] = [];
  for (let i = 0; i < 250; i++) {
    const f = await source.nextFrame();
    t.is(f.type, 'idle');
    if (prev) changed.push(!Buffer.from(prev).equals(Buffer.from(f.image.data)));
    prev = f.image.data;
  }
  for (let start = 0; start + 75 <= changed.length; start++) {
    t.true(changed.slice(start, start + 75).some(Boolean), `frozen from frame ${start}`);
  }
  t.true(changed.filter(Boolean).length > 200);
});

test('mouth opening (mesh inner-lip gap) follows the speech envelope, r > 0.7', async (t) => {
  const source = await portrait.openSource({ configuration: SMALL });
  const phrase = syntheticPhrase(12);
  source.startTurn();
  source.pushAudio(phrase);
  source.endTurn();
  const env: number[] = [], gap: number[] = [];
  for (;;) {
    const f = await source.nextFrame();
    if (f.type === 'speech' || f.type === 'speech-start') {
      env.push(rmsEnvelope(f.audio));
      gap.push(source.lastMouthGapPx);
    }
    if (f.final) break;
  }
  t.is(env.length, Math.ceil(phrase.length / 640));
  const r = pearson(env, gap);
  t.log(`r = ${r.toFixed(3)} over ${env.length} frames`);
  t.true(r > 0.7);
});

test('cancel fades to idle within 200 ms and drops queued speech', async (t) => {
  const source = await portrait.openSource({ configuration: SMALL });
  source.pushAudio(syntheticPhrase(12));
  for (let i = 0; i < 10; i++) await source.nextFrame();
  t.true(source.cancel());
  const after: FaceFrame[] = [];
  for (let i = 0; i < 20; i++) after.push(await source.nextFrame());
  const fade = after.filter((f) => f.type === 'fade-out');
  t.true(fade.length * 40 <= 200);
  t.true(fade.at(-1)!.final);
  t.true(after.slice(fade.length).every((f) => f.type === 'idle' && f.audio.every((s) => s === 0)));
  t.false(source.busy);
  t.false(source.cancel());
});

test('end() plays everything that was sent, then completes the frame stream', async (t) => {
  const clock = new VirtualClock();
  const session = await portrait.openSession({ configuration: SMALL, imageFormat: 'rgb' }, clock);
  const frames: FaceFrame[] = [];
  let completed = false;
  session.frames.subscribe({ next: (f) => frames.push(f), complete: () => { completed = true; } });
  const phrase = syntheticPhrase(4);
  session.startTurn();
  session.pushAudio(phrase);
  const ended = session.end();
  await clock.advanceUntil(() => completed, 10_000, 40);
  await ended;
  const speech = frames.filter((f) => f.type === 'speech' || f.type === 'speech-start');
  t.is(speech.length, Math.ceil(phrase.length / 640));
  t.is(speech[0]!.type, 'speech-start');
  const played = new Int16Array(speech.length * 640);
  speech.forEach((f, i) => played.set(f.audio, i * 640));
  t.deepEqual(Array.from(played.subarray(0, phrase.length)), Array.from(phrase));
  t.true(frames.at(-1)!.final);
});

test('landmarks are computed once per distinct image and reusable from their JSON', async (t) => {
  const own = new FaceReferenceCache();
  const model = new HumanFaceModel('human-presence', { referenceCache: own });
  const image = new Uint8Array(readFileSync(DEFAULT_FACE_IMAGE_PATH));
  const [a, b] = await Promise.all([model.prepareReference(image), model.prepareReference(image.slice())]);
  await model.openSource({ referenceImage: image, configuration: SMALL });
  t.is(own.detector.detections, 1);
  t.deepEqual(a.landmarks, b.landmarks);
  t.is(a.landmarks.points.length, 136);
  const stored = JSON.parse(JSON.stringify(a.landmarks));
  const fresh = new FaceReferenceCache();
  await new HumanFaceModel('human-portrait', { referenceCache: fresh }).openSource({ referenceImage: { image, landmarks: stored }, configuration: SMALL });
  t.is(fresh.detector.detections, 0);
});

test('phoneme timings close the lips on bilabials even while the audio is loud', async (t) => {
  const run = async (phonemes?: Array<{ phoneme: string; startMs: number; endMs: number }>) => {
    const source = await portrait.openSource({ configuration: SMALL });
    const tone = syntheticPhrase(1);
    source.startTurn({ phonemes });
    source.pushAudio(tone);
    source.endTurn();
    const gaps: number[] = [];
    for (let i = 0; i < Math.ceil(tone.length / 640); i++) { await source.nextFrame(); gaps.push(source.lastMouthGapPx); }
    return gaps;
  };
  const plain = await run();
  const withM = await run([{ phoneme: 'M', startMs: 0, endMs: 10_000 }]);
  // The first frames blend in from the reference mouth (open in this photo); judge after the ramp.
  t.true(Math.max(...plain.slice(3)) > 3);
  t.true(Math.max(...withM.slice(3)) < 1, `gaps ${withM.map((g) => g.toFixed(1)).join(' ')}`);
});

test('human-presence plays a turn through the same interface', async (t) => {
  const presence = new HumanFaceModel('human-presence', { referenceCache: cache });
  const source = await presence.openSource({ configuration: { ...SMALL, expressiveness: 2 } });
  source.pushAudio(syntheticPhrase(8));
  source.endTurn();
  const types = new Set<string>();
  for (let i = 0; i < 60; i++) types.add((await source.nextFrame()).type);
  t.true(types.has('speech-start') && types.has('speech'));
});

test('human-presence is more expressive on the same speech: stressed syllables raise the brows and nod the head', async (t) => {
  const { FaceAnimator, analyseWindow } = await import('../../plugins/face/face-animator.ts');
  const { resolveFaceOptions } = await import('../../plugins/face/configuration.ts');
  const phrase = syntheticPhrase(12);
  const drive = (variant: 'human-portrait' | 'human-presence') => {
    const animator = new FaceAnimator(resolveFaceOptions(variant, {}), 7);
    const poses = [];
    for (let i = 0; i + 640 <= phrase.length; i += 640) {
      poses.push(animator.step(analyseWindow(phrase.subarray(i, i + 640)), analyseWindow(phrase.subarray(i + 640, i + 1280)), true));
    }
    return poses;
  };
  const range = (xs: number[]) => Math.max(...xs) - Math.min(...xs);
  const portraitPoses = drive('human-portrait');
  const presencePoses = drive('human-presence');
  const browPortrait = Math.max(...portraitPoses.map((p) => p.browRaise));
  const browPresence = Math.max(...presencePoses.map((p) => p.browRaise));
  const nodPortrait = range(portraitPoses.map((p) => p.pitch));
  const nodPresence = range(presencePoses.map((p) => p.pitch));
  t.log(`brow max ${browPortrait.toFixed(3)} -> ${browPresence.toFixed(3)}, nod range ${nodPortrait.toFixed(4)} -> ${nodPresence.toFixed(4)} rad`);
  t.true(browPresence > 2 * browPortrait, 'brows rise on stressed syllables');
  t.true(nodPresence > 1.5 * nodPortrait, 'the head nods with the prosody');
  // Both keep breathing and swaying the shoulders.
  t.true(range(presencePoses.map((p) => p.shoulderSway)) > 0);
  t.true(range(portraitPoses.map((p) => p.breath)) > 0);
});
