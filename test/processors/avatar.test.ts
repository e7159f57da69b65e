/**
 * The avatar processor with the in-process human-portrait face, on the real clock (the face
 * renders in real time): TTS audio in, paired images and audio out, speaking state from what
 * was emitted, interruption.
 */
import test, { type ExecutionContext } from 'ava';
import { holdsWithin, until } from '../../testing/until.ts';
import { frame, PipelineWorker, Pipeline, RealClock, Registry, type Frame } from '../../core/index.ts';
import { AvatarProcessor } from '../../processors/avatar/avatar-processor.ts';
import type { FaceModel, FaceSession } from '../../processors/avatar/face-model.ts';
import { TTSProcessor } from '../../processors/tts/tts-processor.ts';
import { OutputTransport } from '../../transports/output-transport.ts';
import { MemoryMediaSink } from '../../transports/media-sink.ts';
import { FaceRenderPool, facePlugin, HumanFaceModel } from '../../plugins/face/index.ts';
import { RecordingObserver } from '../../core/observer.ts';
import { ToneTTS } from './scripted-services.ts';

const registry = new Registry().use(facePlugin);
const face = registry.create<FaceModel>('face', 'human-portrait');
const SMALL_RGB = { configuration: { width: 256, height: 192 }, imageFormat: 'rgb' } as const;

// The first session of a process loads the face engine (6 s measured with CI beside it, more under a
// hog): opened once here, so that the tests' bounds are about frames, not loading (local CI run K:
// 'ten idle frames' timed out after 10 s while the first test paid for it).
test.before(async () => {
  const warm = await face.openSession(SMALL_RGB, new RealClock());
  warm.close();
});

async function avatarSession(t: ExecutionContext) {
  const clock = new RealClock();
  const sink = new MemoryMediaSink();
  const tts = new ToneTTS(clock, 20);
  const avatar = new AvatarProcessor((c) => face.openSession(SMALL_RGB, c));
  const output = new OutputTransport(sink, { sampleRate: 16_000 });
  const observer = new RecordingObserver();
  const worker = new PipelineWorker(new Pipeline([new TTSProcessor(tts, { sampleRate: 16_000 }), avatar, output]), {
    clock,
    audioOutSampleRate: 16_000,
    heartbeatMs: null,
    idleTimeoutMs: null,
    observers: [observer],
  });
  void worker.run();
  // Stop the face even when an assertion fails, so the test process can exit.
  t.teardown(() => worker.cancel());
  const outOf = (name: string) => observer.events.filter((e) => e.source === name && e.direction === 'downstream').map((e) => e.frame);
  return { clock, sink, avatar, output, worker, observer, outOf };
}

const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));

test.serial('idle frames flow before any speech: images only, no audio, the bot is not speaking', async (t) => {
  const s = await avatarSession(t);
  await until(() => s.sink.images.length >= 10, { timeoutMs: 10_000, what: 'ten idle frames at the output' });
  t.is(s.sink.audio.length, 0);
  t.false(s.output.botSpeaking);
  const img = s.sink.images[0]!.image;
  t.like(img, { width: 256, height: 192, format: 'rgb' });
  t.is(img.data.length, 256 * 192 * 3);
  await s.worker.cancel();
});

test.serial('speech: paired image + 40 ms audio per frame, speaking state from what was emitted, tts-stopped after the last frame', async (t) => {
  const s = await avatarSession(t);
  await holdsWithin(() => s.sink.images.length >= 3, { timeoutMs: 10_000 });
  s.worker.queueFrame(frame('tts-speak', { text: 'one two three four five six seven eight' }));
  await until(() => s.output.botSpeaking, { timeoutMs: 10_000, what: 'the bot to start speaking' });
  await until(() => !s.output.botSpeaking && s.sink.audioMs > 0, { timeoutMs: 10_000, what: 'the bot to finish speaking, its audio written' });
  const avatarOut: Frame[] = s.outOf(s.avatar.name);
  const audio = avatarOut.filter((f) => f.type === 'output-audio');
  t.true(audio.length >= 12, `${audio.length} speech frames for 480 ms of speech`);
  t.true(audio.every((f) => f.type === 'output-audio' && f.pcm.length === 640 && f.sampleRate === 16_000));
  // Every audio frame directly follows the image of the same frame (same pts).
  for (const a of audio) {
    const i = avatarOut.indexOf(a);
    t.is(avatarOut[i - 1]!.type, 'output-image');
    t.is(avatarOut[i - 1]!.pts, a.pts);
  }
  const stopAt = avatarOut.findIndex((f) => f.type === 'tts-stopped');
  const lastAudio = avatarOut.lastIndexOf(audio.at(-1)!);
  t.true(stopAt > lastAudio, 'tts-stopped is released after the last speech frame');
  t.true(Math.abs(s.sink.audioMs - audio.length * 40) <= 40);
  await s.worker.cancel();
});

test.serial('an interruption cancels the face: speech frames stop and the face returns to idle', async (t) => {
  const s = await avatarSession(t);
  await holdsWithin(() => s.sink.images.length >= 3, { timeoutMs: 10_000 });
  s.worker.queueFrame(frame('tts-speak', { text: Array.from({ length: 40 }, (_, i) => `word${i}`).join(' ') }));
  await until(() => s.output.botSpeaking, { timeoutMs: 10_000, what: 'the bot to start speaking' });
  await wait(300);
  s.worker.interrupt();
  const frameTypesAfter = () => s.outOf(s.avatar.name).filter((f) => f.type === 'output-image').map((f) => (f.type === 'output-image' ? f.frameType : ''));
  const before = frameTypesAfter().length;
  await until(() => frameTypesAfter().slice(before).includes('idle'), { timeoutMs: 2000, what: 'an idle frame after the interruption' });
  const after = frameTypesAfter().slice(before);
  t.true(after.indexOf('idle') <= 6, `idle within 200 ms of the interruption (${after.indexOf('idle')} frames)`);
  t.false(after.slice(after.indexOf('idle')).some((x) => x === 'speech'), 'no speech after returning to idle');
  t.false(s.output.botSpeaking);
  await s.worker.cancel();
});

test.serial('a pipeline cancelled while its face session is still opening closes that session when it comes (nothing left running)', async (t) => {
  let letOpen!: () => void;
  const gate = new Promise<void>((resolve) => (letOpen = resolve));
  let asked = false;
  let opened: FaceSession | undefined;
  const avatar = new AvatarProcessor(async (clock) => {
    asked = true;
    await gate;
    opened = await face.openSession(SMALL_RGB, clock);
    return opened;
  });
  const worker = new PipelineWorker(new Pipeline([avatar]), { clock: new RealClock(), heartbeatMs: null, idleTimeoutMs: null });
  const running = worker.run();
  t.teardown(() => opened?.close());
  await until(() => asked, { timeoutMs: 10_000, what: 'the processor to open its face session' });
  await worker.cancel();
  letOpen();
  await until(() => opened !== undefined, { timeoutMs: 10_000, what: 'the session to open' });
  let frames = 0;
  let closed = false;
  opened!.frames.subscribe({ next: () => frames++, complete: () => (closed = true) });
  await until(() => closed, { timeoutMs: 5_000, what: 'the late session to be closed' });
  t.is(frames, 0, 'it never produced a frame for a pipeline that was gone');
  await running.catch(() => undefined);
});

test.serial('a face that stops rendering (its render worker killed mid-speech) ends the pipeline with a fatal face_failed error, and the process goes on', async (t) => {
  // Its own pool, so the worker killed is this session's only.
  const pool = new FaceRenderPool({ threads: 1, idleShutdownMs: 60_000 });
  t.teardown(() => pool.close());
  const pooled = new HumanFaceModel('human-portrait', { renderPool: pool });
  const clock = new RealClock();
  const sink = new MemoryMediaSink();
  const avatar = new AvatarProcessor((c) => pooled.openSession(SMALL_RGB, c));
  const output = new OutputTransport(sink, { sampleRate: 16_000 });
  const observer = new RecordingObserver();
  const worker = new PipelineWorker(new Pipeline([new TTSProcessor(new ToneTTS(clock, 20), { sampleRate: 16_000 }), avatar, output]), {
    clock,
    audioOutSampleRate: 16_000,
    heartbeatMs: null,
    idleTimeoutMs: null,
    observers: [observer],
  });
  const running = worker.run();
  t.teardown(() => worker.cancel());
  // A new pool's worker loads the face engine first (seconds under load): the bound only catches a hang.
  await until(() => sink.images.length >= 3, { timeoutMs: 60_000, what: 'three frames' });
  worker.queueFrame(frame('tts-speak', { text: Array.from({ length: 40 }, (_, i) => `word${i}`).join(' ') }));
  await until(() => output.botSpeaking, { timeoutMs: 30_000, what: 'the bot speaking' });
  const [only] = pool.describe();
  await pool.killWorker(only!.threadId);
  const outcome = await running;
  t.is(outcome.how, 'cancelled');
  t.regex(outcome.reason ?? '', /^fatal error: the face stopped rendering: /);
  const errors = observer.events.map((e) => e.frame).filter((f): f is Extract<Frame, { type: 'error' }> => f.type === 'error');
  t.like(errors.at(-1), { fatal: true, code: 'face_failed', processor: avatar.name });
  // An uncaught exception (what rxjs does with an unhandled error, from a timer) would fail this
  // file; give such a timer its turn before the test ends.
  await new Promise((r) => setTimeout(r, 50));
});
