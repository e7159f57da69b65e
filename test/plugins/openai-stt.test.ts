/**
 * `stt:openai` against the OpenAI audio wire fake, in both modes: the Realtime transcription
 * session (interim deltas, final at each commit) and the batch endpoint (one WAV per utterance cut
 * at the VAD stop). Through the shared STT processor: a drop mid-turn, rate limiting, a refused
 * key and malformed messages, each with what the pipeline does about it.
 */
import test from 'ava';
import { RealClock } from '../../core/clock.ts';
import { frame } from '../../core/frames.ts';
import { Pipeline } from '../../core/pipeline.ts';
import { Registry } from '../../core/registry.ts';
import { PipelineWorker } from '../../core/worker.ts';
import { CaptureProcessor, HARNESS_IGNORED } from '../../core/testing/index.ts';
import { STTProcessor } from '../../processors/stt/stt-processor.ts';
import type { STTStreamOptions, TranscriptEvent } from '../../processors/services.ts';
import { OpenAIAudioError, OpenAISTTService, openaiPlugin, realtimeUrl } from '../../plugins/openai/index.ts';
import { until } from '../../testing/until.ts';
import { startOpenAIAudioFake, type OpenAIAudioFake, type OpenAIAudioFakeOptions } from '../fakes/openai-audio.ts';

const RATE = 16_000;
const OPTIONS: STTStreamOptions = { language: 'en-US', sampleRate: RATE, channels: 1, interimResults: true };
const SCRIPT = ['Hello there.', 'What is the weather like in Paris today?'];

/** A 200 Hz tone with syllable-like dips: speech to the fake's energy detector. */
function voice(ms: number): Int16Array {
  const n = Math.round((ms * RATE) / 1000);
  const out = new Int16Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.round(8000 * (0.6 + 0.4 * Math.sin((2 * Math.PI * 4 * i) / RATE)) * Math.sin((2 * Math.PI * 200 * i) / RATE));
  return out;
}
const silence = (ms: number) => new Int16Array(Math.round((ms * RATE) / 1000));
/** The fake vendor answers on loopback: waits poll every 5 ms, bounded at 5 s unless a wait says otherwise. */
const FAKE_WAIT = { timeoutMs: 5000, intervalMs: 5 } as const;

async function setup(t: any, fakeOptions: OpenAIAudioFakeOptions = {}) {
  const fake = await startOpenAIAudioFake({ script: SCRIPT, ...fakeOptions });
  t.teardown(() => fake.close());
  const service = (mode: 'realtime' | 'batch', extra: Record<string, unknown> = {}) => new OpenAISTTService({ apiKey: fake.apiKey, baseUrl: fake.baseURL, mode, ...extra }, {});
  return { fake, service };
}

function send(stream: { sendAudio(pcm: Int16Array): void }, ...parts: Int16Array[]): void {
  for (const part of parts) for (let at = 0; at < part.length; at += RATE / 50) stream.sendAudio(part.subarray(at, at + RATE / 50));
}

test('realtime: a transcription-intent session, audio at 24 kHz, interim deltas then the final at each commit', async (t) => {
  const { fake, service } = await setup(t);
  const stream = await service('realtime').connect(OPTIONS);
  const events: TranscriptEvent[] = [];
  stream.transcripts.subscribe((e) => events.push(e));
  send(stream, silence(200), voice(800), silence(300));
  stream.finalize();
  send(stream, voice(1200), silence(300));
  stream.finalize();
  await until(() => events.filter((e) => e.final).length === 2, { ...FAKE_WAIT, what: 'two finals' });
  await stream.close();

  const finals = events.filter((e) => e.final);
  t.deepEqual(finals.map((e) => e.text), SCRIPT);
  t.deepEqual(finals.map((e) => e.endMs), [1300, 2800], 'each final covers the audio up to its commit');
  const interims = events.filter((e) => !e.final).map((e) => e.text);
  t.deepEqual(interims.slice(0, 2), ['Hello', 'Hello there.'], 'the deltas accumulate');
  const socket = fake.sockets[0]!;
  t.is(socket.intent, 'transcription');
  t.is(socket.model, null, 'no model in the URL: a transcription session');
  t.deepEqual(socket.session, { type: 'transcription', audio: { input: { format: { type: 'audio/pcm', rate: 24_000 }, transcription: { model: 'gpt-4o-mini-transcribe', language: 'en' }, turn_detection: null } } });
  t.true(Math.abs(socket.audioMs - 2800) < 30, `${socket.audioMs} ms of 24 kHz audio received for 2800 ms sent`);
  t.is(socket.commits, 2);
  t.is(socket.token, fake.apiKey);
});

test('realtime: the URL follows the base URL (ws for http, wss for https)', (t) => {
  t.is(realtimeUrl('http://127.0.0.1:8000/v1'), 'ws://127.0.0.1:8000/v1/realtime?intent=transcription');
  t.is(realtimeUrl('https://api.openai.com/v1/'), 'wss://api.openai.com/v1/realtime?intent=transcription');
});

test('realtime: a commit of silence or under 100 ms loses nothing and delivers no words', async (t) => {
  const { fake, service } = await setup(t);
  const stream = await service('realtime').connect(OPTIONS);
  const events: TranscriptEvent[] = [];
  stream.transcripts.subscribe((e) => events.push(e));
  send(stream, silence(50));
  stream.finalize(); // under 100 ms: not committed at all
  send(stream, silence(500));
  stream.finalize();
  await until(() => events.some((e) => e.final), { ...FAKE_WAIT, what: 'the empty final' });
  t.deepEqual(events, [{ text: '', final: true, endOfUtterance: true, endMs: 550, language: 'en-US' }]);
  t.is(fake.sockets[0]!.commits, 1);
  await stream.close();
});

test('batch: each utterance cut at finalize() is one WAV request, its text one final', async (t) => {
  const { fake, service } = await setup(t);
  const stream = await service('batch', { model: 'whisper-1' }).connect({ ...OPTIONS, language: 'fr' });
  const events: TranscriptEvent[] = [];
  stream.transcripts.subscribe((e) => events.push(e));
  send(stream, voice(700), silence(200));
  stream.finalize();
  send(stream, voice(900), silence(200));
  stream.finalize();
  await until(() => events.length === 2, { ...FAKE_WAIT, what: 'two finals' });
  await stream.close();
  t.deepEqual(events.map((e) => [e.text, e.final, e.endMs]), [[SCRIPT[0], true, 900], [SCRIPT[1], true, 2000]]);
  t.deepEqual(fake.transcriptions.map((r) => [r.model, r.language, Math.round(r.audioMs), r.sampleRate]), [['whisper-1', 'fr', 900, RATE], ['whisper-1', 'fr', 1100, RATE]]);
});

test('batch: close() still transcribes an utterance already cut, then completes', async (t) => {
  const { service } = await setup(t, { transcriptionDelayMs: 50 });
  const stream = await service('batch').connect(OPTIONS);
  const events: TranscriptEvent[] = [];
  let completed = false;
  stream.transcripts.subscribe({ next: (e) => events.push(e), complete: () => (completed = true) });
  send(stream, voice(600));
  stream.finalize();
  await stream.close();
  t.true(completed);
  t.deepEqual(events.map((e) => e.text), [SCRIPT[0]]);
});

for (const mode of ['realtime', 'batch'] as const) {
  test(`${mode}: a refused key fails connect() with auth_failed, not retryable`, async (t) => {
    const { fake } = await setup(t);
    const err = await t.throwsAsync(new OpenAISTTService({ apiKey: 'sk-wrong-key-1234', baseUrl: fake.baseURL, mode }, {}).connect(OPTIONS));
    t.true(err instanceof OpenAIAudioError, String(err));
    t.like(err, { code: 'auth_failed', retryable: false });
    t.regex(err!.message, /Incorrect API key provided: sk-\*\*\*\*\*1234/);
  });
}

/** An STT processor on the fake, run by a worker as in a bot, with the VAD's stops sent by hand. */
async function onProcessor(t: any, mode: 'realtime' | 'batch', fakeOptions: OpenAIAudioFakeOptions = {}) {
  const { fake, service } = await setup(t, fakeOptions);
  const stt = new STTProcessor(service(mode), { reconnectBaseMs: 20, reconnectMaxMs: 80, reconnectAttempts: 4, language: 'en' });
  const below = new CaptureProcessor('downstream', new Set(HARNESS_IGNORED));
  const worker = new PipelineWorker(new Pipeline([stt, below]), { clock: new RealClock(), audioInSampleRate: RATE, idleTimeoutMs: null, heartbeatMs: null });
  const errors: { code?: string; fatal: boolean; message: string }[] = [];
  worker.events$.subscribe((e) => {
    if (e.type === 'error') errors.push({ code: e.frame.code, fatal: e.frame.fatal, message: e.frame.message });
  });
  const finished = worker.run();
  t.teardown(() => void worker.cancel('test over'));
  const feed = (...parts: Int16Array[]) => {
    for (const pcm of parts) for (let at = 0; at < pcm.length; at += RATE / 50) worker.queueFrame(frame('input-audio', { pcm: pcm.subarray(at, at + RATE / 50), sampleRate: RATE, channels: 1 }));
  };
  const turn = (...parts: Int16Array[]) => {
    worker.queueFrame(frame('vad-speech-started', {}));
    feed(...parts);
  };
  const stop = () => worker.queueFrame(frame('vad-speech-stopped', { silenceMs: 200 }));
  const finals = () => below.frames.filter((f) => f.type === 'transcription' && f.final && f.text).map((f) => (f as { text: string }).text);
  // Audio from before the stream is open waits in the processor's replay buffer and goes out on
  // it; the tests count what each connection received, so they start once the first is set up.
  if (mode === 'realtime') await until(() => fake.sockets.length === 1 && fake.sockets[0]!.session !== undefined, { ...FAKE_WAIT, what: 'the first connection set up' });
  return { fake, stt, worker, errors, finished, feed, turn, stop, finals };
}

test('realtime through the STT processor: a drop mid-utterance is reconnected, the words replayed and transcribed once', async (t) => {
  const s = await onProcessor(t, 'realtime');
  s.turn(voice(700), silence(200));
  s.stop();
  await until(() => s.finals().length === 1, { ...FAKE_WAIT, what: 'the first final' });
  s.turn(voice(600)); // the second utterance begins...
  await until(() => s.fake.sockets[0]!.audioMs >= 1400, { ...FAKE_WAIT, what: 'its audio to arrive' });
  s.fake.dropSockets(); // ...and the connection drops before it ends
  await until(() => s.fake.sockets.length === 2 && s.fake.sockets[1]!.session !== undefined, { ...FAKE_WAIT, what: 'the reconnection' });
  s.feed(voice(400), silence(200));
  s.stop();
  await until(() => s.finals().length === 2, { ...FAKE_WAIT, what: 'the second final' });
  t.deepEqual(s.finals(), SCRIPT);
  t.deepEqual(s.fake.finals, SCRIPT, 'each utterance transcribed once');
  t.is(s.stt.reconnects, 1);
  t.true(s.fake.sockets[1]!.audioMs >= 1150, `the unfinished utterance was replayed (${s.fake.sockets[1]!.audioMs} ms on the new connection)`);
  t.deepEqual(s.errors, []);
});

test('batch through the STT processor: a transcription request cut by the server is retried from the replay, the words not lost', async (t) => {
  const s = await onProcessor(t, 'batch', { script: SCRIPT });
  // The SDK retries a cut request twice itself; the third cut reaches the processor.
  s.fake.setFaults({ dropTranscriptions: 3 });
  s.turn(voice(700), silence(200));
  s.stop();
  await until(() => s.finals().length === 1, { ...FAKE_WAIT, what: 'the final after the retry' });
  t.deepEqual(s.finals(), [SCRIPT[0]]);
  t.is(s.stt.reconnects, 1);
  t.deepEqual(s.fake.transcriptions.map((r) => [r.status, Math.round(r.audioMs)]), [[0, 900], [0, 900], [0, 900], [200, 900]], 'the same utterance, asked again from the replay after the stream failed');
  t.deepEqual(s.errors, []);
});

test('realtime: a 429 at the handshake is retried with backoff until the service lets us in', async (t) => {
  const s = await onProcessor(t, 'realtime');
  s.fake.refuseNextSockets(2, 429);
  s.fake.dropSockets();
  await until(() => s.fake.sockets.length === 2 && s.fake.sockets[1]!.session !== undefined, { ...FAKE_WAIT, what: 'the connection after two refusals' });
  s.turn(voice(700), silence(200));
  s.stop();
  await until(() => s.finals().length === 1, { ...FAKE_WAIT, what: 'the final' });
  t.is(s.stt.reconnects, 1);
  t.false(s.stt.unavailable);
  t.deepEqual(s.errors, []);
});

test('batch: a 429 is retried by the SDK after Retry-After, the utterance transcribed once', async (t) => {
  const s = await onProcessor(t, 'batch');
  s.fake.failNext(1, 429);
  s.turn(voice(700), silence(200));
  s.stop();
  await until(() => s.finals().length === 1, { ...FAKE_WAIT, what: 'the final' });
  t.is(s.fake.failed, 1);
  t.is(s.fake.transcriptions.length, 1);
  t.is(s.stt.reconnects, 0);
});

for (const mode of ['realtime', 'batch'] as const) {
  test(`${mode}: a malformed message from the server ends the pipeline with a fatal stt_invalid_response (no crash, no deaf bot)`, async (t) => {
    const s = await onProcessor(t, mode);
    s.fake.setFaults(mode === 'realtime' ? { malformedRealtime: true } : { malformedTranscriptions: 1 });
    s.turn(voice(700), silence(200));
    s.stop();
    const outcome = await s.finished;
    t.is(outcome.how, 'cancelled');
    t.like(s.errors.at(-1), { code: 'stt_invalid_response', fatal: true });
    t.regex(outcome.reason ?? '', /fatal error: speech-to-text openai refused the connection: the transcription server (sent a message that is not a Realtime event|answered with something that is not JSON)/);
  });
}

test('the plugin registers stt:openai; key, base URL, mode and model come from the environment', async (t) => {
  const { fake } = await setup(t);
  const registry = new Registry().use(openaiPlugin);
  t.deepEqual(registry.slugs('stt'), ['openai']);
  const made = new OpenAISTTService({}, { OPENAI_API_KEY: 'sk-general', OPENAI_STT_API_KEY: fake.apiKey, OPENAI_BASE_URL: 'http://llm.invalid/v1', OPENAI_STT_BASE_URL: fake.baseURL, OPENAI_STT_MODE: 'batch', OPENAI_STT_MODEL: 'whisper-1' });
  t.like(made, { mode: 'batch', model: 'whisper-1', baseUrl: fake.baseURL });
  const stream = await made.connect(OPTIONS);
  await stream.close();
  t.throws(() => new OpenAISTTService({}, {}), { instanceOf: OpenAIAudioError, message: /OPENAI_STT_API_KEY or OPENAI_API_KEY/ });
  t.throws(() => new OpenAISTTService({ apiKey: 'k' }, { OPENAI_STT_MODE: 'streaming' }), { message: /must be realtime or batch/ });
});
