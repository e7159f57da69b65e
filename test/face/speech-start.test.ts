/**
 * A turn that becomes ready while an idle frame waits for its due time starts in that frame's
 * audio (FaceFrameSource.startSpeechIn), and the frame goes out then, not at its due time nor a
 * frame and a render lead later; when no frame is on its way, the next one is rendered at once for
 * it. The frame's picture stays the idle one (or is the speech one, rendered for it). The frames
 * after it follow 40 ms apart, and the grid returns to the session's own once the face idles.
 */
import test from 'ava';
import { VirtualClock } from '../../core/clock.ts';
import type { FaceFrame } from '../../processors/avatar/face-model.ts';
import { FaceReferenceCache, HumanFaceModel } from '../../plugins/face/index.ts';
import { syntheticPhrase } from './speech-signal.ts';

const SMALL = { width: 320, height: 180 };
const portrait = new HumanFaceModel('human-portrait', { referenceCache: new FaceReferenceCache() });

function loudness(pcm: Int16Array): number {
  let sum = 0;
  for (const s of pcm) sum += Math.abs(s);
  return sum / pcm.length;
}

async function sessionWithSpeechAt(pushAtMs: number, speech: Int16Array, endTurn: boolean): Promise<{ frames: FaceFrame[]; at: number[] }> {
  const clock = new VirtualClock();
  const session = await portrait.openSession({ configuration: SMALL, imageFormat: 'rgb' }, clock);
  const frames: FaceFrame[] = [];
  const at: number[] = [];
  // Times are from frame 0's due time (frame n is due at n * 40 ms while the face idles).
  const frame0 = session.startedAtMs;
  session.frames.subscribe((f) => {
    frames.push(f);
    at.push(clock.now() - frame0);
  });
  await clock.advance(frame0 + pushAtMs - clock.now());
  session.pushAudio(speech);
  if (endTurn) session.endTurn();
  await clock.advance(400);
  session.close();
  return { frames, at };
}

test('speech that becomes ready after frame 5 was decided (and before it is due) plays from frame 5, sent at once', async (t) => {
  // Frame 5 is due at 200 ms and decided 32 ms before (the render lead): at 168 ms.
  const speech = syntheticPhrase(0.4);
  const { frames, at } = await sessionWithSpeechAt(185, speech, true);
  const first = frames.findIndex((f) => f.type === 'speech-start');
  t.is(first, 5, `speech-start at frame ${first}`);
  t.is(at[first], 185, 'sent when the speech came, not at its due time (200 ms)');
  t.is(at[first - 1], 160, 'the frame before went out at its own time');
  t.is(at[first + 1], 225, 'the next one 40 ms later');
  const f = frames[first]!;
  t.deepEqual(Array.from(f.audio), Array.from(speech.subarray(0, 640)), 'the frame carries the turn\'s first 40 ms');
  t.true(frames.slice(0, 5).every((x) => x.type === 'idle' && loudness(x.audio) === 0));
  // The turn continues from there: the next frame carries the next 40 ms.
  t.is(frames[first + 1]!.type, 'speech');
  t.deepEqual(Array.from(frames[first + 1]!.audio), Array.from(speech.subarray(640, 1280)));
  // Every sample of the turn is played once.
  const played = frames.filter((x) => x.type === 'speech' || x.type === 'speech-start').reduce((n, x) => n + x.audio.length, 0);
  t.is(played, Math.ceil(speech.length / 640) * 640);
  // Each frame says how many of the turn's samples it carried: all of them once, the padding of the last frame not counted.
  const carried = frames.filter((x) => x.type === 'speech' || x.type === 'speech-start').map((x) => x.speechSamples);
  t.true(carried.every((n) => n !== undefined), 'every speech frame tells');
  t.is(carried.reduce((n: number, c) => n + c!, 0), speech.length);
});

test('a turn waiting for more audio (the TTS slower than real time) shows speech frames that carry none of its samples', async (t) => {
  const clock = new VirtualClock();
  const session = await portrait.openSession({ configuration: SMALL, imageFormat: 'rgb' }, clock);
  const frames: FaceFrame[] = [];
  session.frames.subscribe((f) => frames.push(f));
  const speech = syntheticPhrase(0.4);
  session.pushAudio(speech.subarray(0, 640 * 4)); // 160 ms, the turn left open
  await clock.advance(600);
  session.pushAudio(speech.subarray(640 * 4));
  session.endTurn();
  await clock.advance(600);
  session.close();
  const turn = frames.filter((f) => f.type === 'speech' || f.type === 'speech-start');
  const waiting = turn.filter((f) => f.speechSamples === 0);
  t.true(waiting.length >= 5, `${waiting.length} frames waited for audio`);
  t.true(waiting.every((f) => loudness(f.audio) === 0));
  t.is(turn.reduce((n, f) => n + (f.speechSamples ?? 0), 0), speech.length, 'every sample of the turn counted once');
});

test('speech not yet ready at the due time (under the prebuffer, turn open) waits: the idle frame stays idle', async (t) => {
  // 40 ms queued, turn still open: under the 80 ms prebuffer, so frame 5 must not start it.
  const { frames } = await sessionWithSpeechAt(185, syntheticPhrase(0.4).subarray(0, 640), false);
  t.is(frames[5]!.type, 'idle');
  t.is(loudness(frames[5]!.audio), 0);
  t.false(frames.some((f) => f.type === 'speech-start'));
});

test('whenever speech arrives, its first frame goes out then: the face adds no wait for the frame grid', async (t) => {
  const speech = syntheticPhrase(2);
  // 81: frame 2 went out at 80 and frame 3 is not rendered yet (at 88): it is rendered at once,
  // as the turn's first speech frame. 100, 119: frame 3 is rendered and waits (due at 120).
  for (const pushAt of [81, 100, 119, 150, 185]) {
    const { frames, at } = await sessionWithSpeechAt(pushAt, speech, true);
    const first = frames.findIndex((f) => f.type === 'speech-start');
    t.is(first, Math.ceil(pushAt / 40), `pushed at ${pushAt} ms`);
    t.is(at[first], pushAt, `pushed at ${pushAt} ms: sent at once`);
    // Its audio is the turn's first 40 ms, and every later frame follows 40 ms apart.
    t.deepEqual(Array.from(frames[first]!.audio), Array.from(speech.subarray(0, 640)));
    for (let i = first + 1; i < frames.length; i++) t.is(at[i]! - at[i - 1]!, 40, `pushed at ${pushAt} ms, frame ${i}`);
  }
});

test('once the face idles again the frames return to the session\'s grid: over time it keeps 25 fps of the clock', async (t) => {
  const clock = new VirtualClock();
  const session = await portrait.openSession({ configuration: SMALL, imageFormat: 'rgb' }, clock);
  const frame0 = session.startedAtMs;
  const frames: FaceFrame[] = [];
  const at: number[] = [];
  session.frames.subscribe((f) => { frames.push(f); at.push(clock.now() - frame0); });
  // Two turns, each started between frames (13 and 27 ms before a due time).
  await clock.advance(frame0 + 187 - clock.now());
  session.pushAudio(syntheticPhrase(0.4));
  session.endTurn();
  await clock.advance(frame0 + 1_213 - clock.now());
  session.pushAudio(syntheticPhrase(0.3));
  session.endTurn();
  await clock.advance(frame0 + 3_000 - clock.now());
  session.close();
  const starts = frames.map((f, i) => (f.type === 'speech-start' ? at[i] : null)).filter((x) => x !== null);
  t.deepEqual(starts, [187, 1_213]);
  // After each turn's fade the grid is the session's again: frame n at n * 40 ms.
  const lastIdle = frames.length - 1;
  t.is(frames[lastIdle]!.type, 'idle');
  t.is(at[lastIdle], frames[lastIdle]!.index * 40);
  t.is(session.startedAtMs, frame0);
  // Frames keep 25 fps of the clock: none more than the clock's time allows.
  t.is(frames.length, Math.floor(3_000 / 40) + 1);
  // The one interval that gives the time back is an idle one, longer by the shift (13 or 27 ms).
  const long = at.map((x, i) => (i > 0 ? x - at[i - 1]! : 40)).map((d, i) => ({ d, type: frames[i]!.type })).filter((x) => x.d !== 40);
  t.true(long.every((x) => x.type === 'idle' || x.type === 'speech-start'), JSON.stringify(long));
  t.deepEqual(long.filter((x) => x.type === 'idle').map((x) => x.d).sort(), [53, 67]);
});

test('an open turn (a TTS still streaming) is started early only with a frame of margin beyond the prebuffer', async (t) => {
  const phrase = syntheticPhrase(4);
  // 100 ms queued, turn open: ready for a regular start (prebuffer 80 ms) but not for an early
  // one, whose next frames are decided a render lead sooner: frame 5 stays idle, frame 6 starts.
  const short = await sessionWithSpeechAt(185, phrase.subarray(0, 1600), false);
  t.is(short.frames[5]!.type, 'idle');
  t.is(short.frames.findIndex((f) => f.type === 'speech-start'), 6);
  // 130 ms queued: margin enough, frame 5 starts it.
  const enough = await sessionWithSpeechAt(185, phrase.subarray(0, 2080), false);
  t.is(enough.frames.findIndex((f) => f.type === 'speech-start'), 5);
});
