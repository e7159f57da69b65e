/**
 * A face that relaxes its smile to talk (issue #29): the reference's smile relaxes toward a
 * neutral mouth while speaking, to the configured `expression_strength` share, and comes back
 * between sentences and at rest; a neutral reference stays neutral. Measured as the corner
 * height (how far the mouth corners sit above the lip line) on rendered frames.
 */
import test from 'ava';
import { readFileSync } from 'node:fs';
import { FACE_CONFIGURATION_DEFAULTS, faceConfigurationSchema, validateFaceConfiguration } from '../../plugins/face/configuration.ts';
import { DEFAULT_FACE_IMAGE_PATH, FaceReferenceCache } from '../../plugins/face/index.ts';
import { FaceModelError, type FaceReference } from '../../processors/avatar/face-model.ts';
import { SILENCE_PHONEME } from '../../plugins/local/espeak-timeline.ts';
import { CorpusFace, synthesize, type FrameRecord, type Utterance } from './phoneme-corpus.ts';

const cache = new FaceReferenceCache();
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;

/** Two sentences in one turn with 700 ms of silence between them (a pause between sentences). */
async function twoSentences(): Promise<Utterance & { pauseMs: [number, number] }> {
  const a = await synthesize('Maybe we should move over the blue boat.', 'en-us', 175);
  const b = await synthesize('People see each small movie.', 'en-us', 175);
  const gap = 16 * 700;
  const pcm = new Int16Array(a.pcm.length + gap + b.pcm.length);
  pcm.set(a.pcm, 0);
  pcm.set(b.pcm, a.pcm.length + gap);
  const shift = a.pcm.length / 16 + 700;
  const lastSound = a.phonemes.filter((p) => p.phoneme !== SILENCE_PHONEME).at(-1)!.endMs;
  const firstSound = shift + b.phonemes.find((p) => p.phoneme !== SILENCE_PHONEME)!.startMs;
  return {
    voice: 'en-us', rateWpm: 175, text: `${a.text} ${b.text}`, pcm,
    phonemes: [...a.phonemes, { phoneme: SILENCE_PHONEME, startMs: a.pcm.length / 16, endMs: shift }, ...b.phonemes.map((p) => ({ ...p, startMs: p.startMs + shift, endMs: p.endMs + shift }))],
    words: [...a.words, ...b.words.map((w) => ({ ...w, startMs: w.startMs + shift, endMs: w.endMs + shift }))],
    pauseMs: [lastSound, firstSound],
  };
}

/** Frames well inside a sentence: 400 ms or more after its first sound, before its last. */
const inSpeech = (frames: FrameRecord[], from: number, to: number) => frames.filter((f) => f.index * 40 >= from + 400 && f.index * 40 + 40 <= to);

test('expression_strength: in both schemas, 0..1, default 0.3; out of range or not a number is refused', (t) => {
  for (const variant of ['human-portrait', 'human-presence'] as const) {
    const schema = faceConfigurationSchema(variant) as { properties: Record<string, { minimum: number; maximum: number; default: number }> };
    t.like(schema.properties.expression_strength, { minimum: 0, maximum: 1, default: 0.3 });
    t.is(validateFaceConfiguration(variant, {}).expression_strength, FACE_CONFIGURATION_DEFAULTS.expression_strength);
    t.is(validateFaceConfiguration(variant, { expression_strength: 0.8 }).expression_strength, 0.8);
    for (const bad of [1.5, -0.1, 'high']) {
      const err = t.throws(() => validateFaceConfiguration(variant, { expression_strength: bad }), { instanceOf: FaceModelError });
      t.is(err?.code, 'invalid_configuration');
      t.true(JSON.stringify(err?.details).includes('/expression_strength'), JSON.stringify(err?.details));
    }
  }
});

test('the smile relaxes while speaking (to at most half at the default strength), returns in the pause between sentences and at rest', async (t) => {
  const u = await twoSentences();
  const face = await CorpusFace.open(cache, 'human-portrait');
  const r = await face.play(u, 'phonemes', { tailFrames: 30 });
  face.close();
  const rel = (f: FrameRecord) => f.cornerHeight / r.restCornerHeight;
  const first = inSpeech(r.frames, 0, u.pauseMs[0]), second = inSpeech(r.frames, u.pauseMs[1], u.pcm.length / 16);
  t.log(`corner height / reference: sentence 1 median ${median(first.map(rel)).toFixed(2)}, sentence 2 ${median(second.map(rel)).toFixed(2)}`);
  t.true(median(first.map(rel)) <= 0.5 && median(second.map(rel)) <= 0.5);
  // Between the sentences: back to the photo's smile within 0.5 s of the last sound.
  const pause = r.frames.find((f) => f.index * 40 >= u.pauseMs[0] + 500)!;
  t.true(pause.index * 40 < u.pauseMs[1], 'the pause is longer than 0.5 s');
  t.true(rel(pause) >= 0.9, `0.5 s into the pause: ${rel(pause).toFixed(2)}`);
  // At rest after the turn.
  const end = u.pcm.length / 16;
  const rest = r.frames.find((f) => f.index * 40 >= end + 500)!;
  t.true(rel(rest) >= 0.9, `0.5 s after the turn: ${rel(rest).toFixed(2)}`);
});

test('expression_strength sets how much of the smile stays: 1 keeps it, 0 relaxes it fully', async (t) => {
  const u = await synthesize('Maybe we should move over the blue boat before five.', 'en-us', 175);
  const lastSound = u.phonemes.filter((p) => p.phoneme !== SILENCE_PHONEME).at(-1)!.endMs;
  const smileAt = async (strength: number) => {
    const face = await CorpusFace.open(cache, 'human-portrait', { configuration: { expression_strength: strength } });
    const r = await face.play(u, 'phonemes');
    face.close();
    return median(inSpeech(r.frames, 0, lastSound).map((f) => f.cornerHeight / r.restCornerHeight));
  };
  const [none, some, full] = [await smileAt(0), await smileAt(0.3), await smileAt(1)];
  t.log(`corner height in speech / reference: strength 0 ${none.toFixed(2)}, 0.3 ${some.toFixed(2)}, 1 ${full.toFixed(2)}`);
  t.true(full >= 0.85, 'strength 1 holds the photo\'s smile');
  t.true(none <= 0.25 && none < some && some < full);
});

test('a neutral reference stays neutral: its corners do not move while it speaks', async (t) => {
  // The default photo with its mouth corners put on the lip line (landmarks a neutral mouth has).
  const image = new Uint8Array(readFileSync(DEFAULT_FACE_IMAGE_PATH));
  const { reference } = await cache.prepare(image);
  const p = [...reference.landmarks.points];
  const stomion = (p[2 * 62 + 1]! + p[2 * 66 + 1]!) / 2;
  for (const [corner, inner] of [[48, 60], [54, 64]] as const) {
    const lift = stomion - p[2 * corner + 1]!;
    p[2 * corner + 1] = p[2 * corner + 1]! + lift;
    p[2 * inner + 1] = p[2 * inner + 1]! + lift;
  }
  const neutral: FaceReference = { image, landmarks: { ...reference.landmarks, points: p } };
  const u = await synthesize('Maybe we should move over the blue boat before five.', 'en-us', 175);
  const lastSound = u.phonemes.filter((x) => x.phoneme !== SILENCE_PHONEME).at(-1)!.endMs;
  const face = await CorpusFace.open(cache, 'human-portrait', { referenceImage: neutral });
  const r = await face.play(u, 'phonemes');
  face.close();
  t.true(Math.abs(r.restCornerHeight) < 0.01, `reference corner height ${r.restCornerHeight}`);
  const corners = inSpeech(r.frames, 0, lastSound).map((f) => f.cornerHeight - r.restCornerHeight);
  t.log(`corner height in speech minus the reference's (share of the mouth width): median ${median(corners).toFixed(3)}, range ${Math.min(...corners).toFixed(3)}..${Math.max(...corners).toFixed(3)}`);
  t.true(Math.abs(median(corners)) <= 0.015 && corners.every((c) => Math.abs(c) <= 0.04));
});
