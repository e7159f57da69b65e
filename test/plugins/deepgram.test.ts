import test from 'ava';
import { until } from '../../testing/until.ts';
import { firstValueFrom, toArray } from 'rxjs';
import { Registry } from '../../core/registry.ts';
import { RealClock, VirtualClock, isAbortError } from '../../core/clock.ts';
import { frame } from '../../core/frames.ts';
import { Pipeline } from '../../core/pipeline.ts';
import { PipelineWorker } from '../../core/worker.ts';
import { CaptureProcessor, HARNESS_IGNORED } from '../../core/testing/index.ts';
import { STTProcessor } from '../../processors/stt/stt-processor.ts';
import { LocalTTSService } from '../../plugins/local/index.ts';
import type { STTStream, STTStreamOptions, TranscriptEvent } from '../../processors/services.ts';
import { DeepgramSTTError, DeepgramSTTService, deepgramPlugin, toTranscriptEvent } from '../../plugins/deepgram/index.ts';
import { startDeepgramFake, type DeepgramFake, type DeepgramFakeOptions } from '../fakes/deepgram.ts';

const RATE = 16000;

/** Audio with an envelope a speech detector sees as speech: a 200 Hz tone with syllable-like dips. */
function voice(ms: number, rate = RATE): Int16Array {
  const n = Math.round((ms * rate) / 1000);
  const out = new Int16Array(n);
  for (let i = 0; i < n; i++) {
    const syllable = 0.6 + 0.4 * Math.sin((2 * Math.PI * 4 * i) / rate);
    out[i] = Math.round(8000 * syllable * Math.sin((2 * Math.PI * 200 * i) / rate));
  }
  return out;
}

const silence = (ms: number, rate = RATE) => new Int16Array(Math.round((ms * rate) / 1000));

/** Sends audio in 20 ms chunks, as a transport would (faster than real time: the fake reads content, not wall time). */
function send(stream: STTStream, ...parts: Int16Array[]): void {
  for (const part of parts) {
    const chunk = Math.round(part.length / Math.max(1, Math.round(part.length / (RATE / 50))));
    for (let at = 0; at < part.length; at += chunk) stream.sendAudio(part.subarray(at, at + chunk));
  }
}

const OPTIONS: STTStreamOptions = { language: 'en', sampleRate: RATE, channels: 1, interimResults: true };

async function setup(t: any, fakeOptions: DeepgramFakeOptions = {}, serviceOptions: Record<string, unknown> = {}) {
  const fake: DeepgramFake = await startDeepgramFake({ script: ['Hello there.', 'What is the weather like in Paris today?'], ...fakeOptions });
  t.teardown(() => fake.close());
  const service = new DeepgramSTTService({ apiKey: fake.apiKey, baseUrl: fake.url, ...serviceOptions });
  return { fake, service };
}

/** The fake vendor answers on loopback: waits poll every 5 ms, bounded at 3 s unless a wait says otherwise. */
const FAKE_WAIT = { timeoutMs: 3000, intervalMs: 5 } as const;

test('utterances come back as interim then final transcripts, in script order', async (t) => {
  const { fake, service } = await setup(t);
  const stream = await service.connect(OPTIONS);
  const events: TranscriptEvent[] = [];
  stream.transcripts.subscribe((e) => events.push(e));
  send(stream, silence(300), voice(900), silence(500), voice(1500), silence(500));
  await until(() => events.filter((e) => e.final && e.text).length === 2, { ...FAKE_WAIT, what: 'two finals' });
  await stream.close();

  const finals = events.filter((e) => e.final && e.text);
  t.deepEqual(finals.map((e) => e.text), ['Hello there.', 'What is the weather like in Paris today?']);
  t.true(finals.every((e) => e.endOfUtterance), 'endpointing marks speech_final');
  const interims = events.filter((e) => !e.final);
  t.true(interims.length >= 2, 'interim hypotheses arrived');
  t.true(interims.every((e) => e.text.length > 0));
  t.true(events.indexOf(interims[0]!) < events.indexOf(finals[0]!));
  // Times follow the audio: the first utterance started after 300 ms of silence.
  t.true(Math.abs(finals[0]!.startMs! - 300) <= 20, `start ${finals[0]!.startMs}`);
  t.true(finals[1]!.startMs! > finals[0]!.endMs!);

  const q = fake.connections[0]!.query;
  t.like(q, { encoding: 'linear16', sample_rate: '16000', channels: '1', language: 'en', interim_results: 'true', punctuate: 'true', endpointing: '300', utterance_end_ms: '1000', model: 'nova-3' });
  t.is(fake.connections[0]!.headers.authorization, `Token ${fake.apiKey}`);
});

test('UtteranceEnd after a long enough gap becomes an end-of-utterance marker', async (t) => {
  const { service } = await setup(t);
  const stream = await service.connect(OPTIONS);
  const events: TranscriptEvent[] = [];
  stream.transcripts.subscribe((e) => events.push(e));
  send(stream, voice(800), silence(1300));
  await until(() => events.some((e) => e.text === '' && e.endOfUtterance), { ...FAKE_WAIT, what: 'UtteranceEnd' });
  const marker = events.find((e) => e.text === '' && e.endOfUtterance)!;
  t.true(marker.final);
  t.true(Math.abs(marker.endMs! - 800) <= 20, `last word end ${marker.endMs}`);
  await stream.close();
});

test('finalize() flushes speech still in progress into a final result', async (t) => {
  const { fake, service } = await setup(t, {}, { endpointingMs: false });
  const stream = await service.connect(OPTIONS);
  const events: TranscriptEvent[] = [];
  stream.transcripts.subscribe((e) => events.push(e));
  send(stream, voice(700));
  stream.finalize();
  await until(() => events.some((e) => e.final), { ...FAKE_WAIT, what: 'final after Finalize' });
  const final = events.find((e) => e.final)!;
  t.is(final.text, 'Hello there.');
  t.false(final.endOfUtterance, 'a flushed result is final but not speech_final');
  t.is(fake.connections[0]!.query.endpointing, 'false');
  t.deepEqual(fake.connections[0]!.controls, ['Finalize']);
  await stream.close();
});

test('close() sends CloseStream, receives the last result and completes transcripts', async (t) => {
  const { fake, service } = await setup(t);
  const stream = await service.connect(OPTIONS);
  const all = firstValueFrom(stream.transcripts.pipe(toArray()));
  send(stream, voice(600));
  await stream.close();
  const events = await all;
  t.deepEqual(events.filter((e) => e.final).map((e) => e.text), ['Hello there.']);
  t.deepEqual(fake.connections[0]!.controls, ['CloseStream']);
  t.is(fake.connections[0]!.sent.at(-1)!.type, 'Metadata');
  await until(() => fake.connections[0]!.closeCode !== undefined, { ...FAKE_WAIT, what: 'server close' });
  t.is(fake.connections[0]!.closeCode, 1000);
});

test('a dropped connection errors transcripts with connection_lost', async (t) => {
  const { fake, service } = await setup(t, { dropAfterAudioMs: 1000 });
  const stream = await service.connect(OPTIONS);
  const events: TranscriptEvent[] = [];
  const failed = new Promise<unknown>((resolve) => stream.transcripts.subscribe({ next: (e) => events.push(e), error: resolve }));
  send(stream, voice(600), silence(400), voice(600));
  const err = await failed;
  t.true(err instanceof DeepgramSTTError);
  t.is((err as DeepgramSTTError).code, 'connection_lost');
  t.is((err as DeepgramSTTError).status, 1006);
  t.deepEqual(events.filter((e) => e.final).map((e) => e.text), ['Hello there.'], 'results before the drop were delivered');
  stream.sendAudio(voice(20)); // after the drop: ignored, not thrown
  await stream.close();
});

test('silence past the server timeout closes with NET-0001 unless KeepAlive is sent', async (t) => {
  const quiet = await setup(t, { inactivityTimeoutMs: 150 }, { keepAliveIntervalMs: 60_000 });
  const stream = await quiet.service.connect(OPTIONS);
  const err = await new Promise<unknown>((resolve) => stream.transcripts.subscribe({ error: resolve }));
  t.is((err as DeepgramSTTError).status, 1011);
  t.regex((err as Error).message, /NET-0001/);

  // The kept stream's margin is wide (a KeepAlive every 40 ms against a 1.5 s timeout) so that a loaded machine's
  // timer delays cannot decide the verdict; we wait until three timeouts' worth of KeepAlives went by.
  const kept = await setup(t, { inactivityTimeoutMs: 1500 }, { keepAliveIntervalMs: 40 });
  const alive = await kept.service.connect(OPTIONS);
  let failed = false;
  alive.transcripts.subscribe({ error: () => (failed = true) });
  const keepAlives = () => kept.fake.connections[0]?.controls.filter((c) => c === 'KeepAlive').length ?? 0;
  const started = Date.now();
  await until(() => failed || Date.now() - started >= 4500, { ...FAKE_WAIT, timeoutMs: 10_000, what: 'three timeout windows' });
  t.false(failed);
  t.true(keepAlives() >= 3, `${keepAlives()} KeepAlive messages`);
  t.is(kept.fake.connections[0]!.closeCode, undefined, 'the server kept the socket open');
  await alive.close();
});

test('keepalives run on the injected clock', async (t) => {
  const clock = new VirtualClock();
  const { fake, service } = await setup(t, {}, { clock, keepAliveIntervalMs: 4000 });
  const stream = await service.connect(OPTIONS);
  await clock.advance(3999);
  await new Promise((r) => setTimeout(r, 50));
  t.deepEqual(fake.connections[0]!.controls, []);
  await clock.advance(1);
  await until(() => fake.connections[0]!.controls.length === 1, { ...FAKE_WAIT, what: 'a KeepAlive' });
  t.deepEqual(fake.connections[0]!.controls, ['KeepAlive']);
  stream.sendAudio(silence(20));
  await clock.advance(4000);
  await until(() => fake.connections[0]!.controls.length >= 2, { ...FAKE_WAIT, what: 'a second KeepAlive' });
  t.deepEqual(fake.connections[0]!.controls, ['KeepAlive', 'KeepAlive']);
  await stream.close();
});

test('a wrong key is refused at the handshake with auth_failed', async (t) => {
  const { fake } = await setup(t);
  const service = new DeepgramSTTService({ apiKey: 'wrong-key', baseUrl: fake.url });
  const err = await t.throwsAsync(service.connect(OPTIONS), { instanceOf: DeepgramSTTError });
  t.is(err!.code, 'auth_failed');
  t.is(err!.status, 401);
  t.is(fake.connections.length, 0);
});

for (const rate of [8000, 24000, 48000]) {
  test(`audio at ${rate} Hz is declared and timed at that rate`, async (t) => {
    const { fake, service } = await setup(t);
    const stream = await service.connect({ ...OPTIONS, sampleRate: rate });
    const events: TranscriptEvent[] = [];
    stream.transcripts.subscribe((e) => events.push(e));
    for (const part of [silence(500, rate), voice(1000, rate), silence(400, rate)]) {
      for (let at = 0; at < part.length; at += rate / 50) stream.sendAudio(part.subarray(at, at + rate / 50));
    }
    await until(() => events.some((e) => e.final), { ...FAKE_WAIT, what: 'final' });
    const final = events.find((e) => e.final)!;
    t.is(fake.connections[0]!.query.sample_rate, String(rate));
    t.true(Math.abs(final.startMs! - 500) <= 20, `start ${final.startMs}`);
    t.true(Math.abs(final.endMs! - 1500) <= 20, `end ${final.endMs}`);
    await stream.close();
  });
}

test('the agent language is sent and carried on the events', async (t) => {
  const { fake, service } = await setup(t, { script: (u) => (u.language === 'fr' ? 'Bonjour, quel temps fait-il ?' : 'Hello.') });
  const stream = await service.connect({ ...OPTIONS, language: 'fr' });
  const events: TranscriptEvent[] = [];
  stream.transcripts.subscribe((e) => events.push(e));
  send(stream, voice(900), silence(400));
  await until(() => events.some((e) => e.final), { ...FAKE_WAIT, what: 'final' });
  t.is(fake.connections[0]!.query.language, 'fr');
  t.is(events.find((e) => e.final)!.text, 'Bonjour, quel temps fait-il ?');
  t.true(events.every((e) => e.language === 'fr'));
  await stream.close();
});

test('message mapping skips silence and non-transcript messages', (t) => {
  t.is(toTranscriptEvent({ type: 'Results', is_final: false, channel: { alternatives: [{ transcript: '' }] } }, 'en'), undefined);
  t.is(toTranscriptEvent({ type: 'Metadata', request_id: 'x' }, 'en'), undefined);
  t.is(toTranscriptEvent({ type: 'SpeechStarted', timestamp: 1 }, 'en'), undefined);
  t.is(toTranscriptEvent('not json', 'en'), undefined);
  t.deepEqual(toTranscriptEvent({ type: 'Results', start: 1.5, duration: 0.5, is_final: true, speech_final: true, channel: { alternatives: [{ transcript: 'hi', confidence: 0.9 }] } }, 'en'),
    { text: 'hi', final: true, endOfUtterance: true, language: 'en', confidence: 0.9, startMs: 1500, endMs: 2000 });
  // With words, the times are the speech's, not the window's (which includes leading silence).
  t.like(toTranscriptEvent({ type: 'Results', start: 3.02, duration: 3.03, is_final: true, channel: { alternatives: [{ transcript: 'no', words: [{ start: 5.42, end: 5.74 }] }] } }, 'en'),
    { startMs: 5420, endMs: 5740 });
});

test('the plugin registers stt:deepgram and reads DEEPGRAM_API_KEY', async (t) => {
  const { fake } = await setup(t);
  const registry = new Registry().use(deepgramPlugin);
  t.deepEqual(registry.slugs('stt'), ['deepgram']);
  const made = registry.create<DeepgramSTTService>('stt', 'deepgram', { apiKey: fake.apiKey, baseUrl: fake.url, model: 'nova-2' });
  t.is(made.model, 'nova-2');
  const fromEnv = new DeepgramSTTService({ baseUrl: fake.url }, { DEEPGRAM_API_KEY: fake.apiKey });
  const stream = await fromEnv.connect(OPTIONS);
  await stream.close();
  t.is(fake.connections.length, 1);
  t.throws(() => new DeepgramSTTService({}, {}), { instanceOf: DeepgramSTTError, message: /DEEPGRAM_API_KEY/ });
});

test('the fake holds a final back for finalDelayMs on its clock', async (t) => {
  const clock = new VirtualClock();
  const { fake, service } = await setup(t, { clock, finalDelayMs: 150 });
  const stream = await service.connect({ ...OPTIONS, interimResults: false });
  const events: TranscriptEvent[] = [];
  stream.transcripts.subscribe((e) => events.push(e));
  send(stream, voice(500));
  stream.finalize();
  await until(() => fake.finalTimings.length === 1, { ...FAKE_WAIT, what: 'the final to be decided' });
  await clock.advance(149);
  await new Promise((r) => setTimeout(r, 50));
  t.is(events.length, 0, 'nothing before the configured latency');
  await clock.advance(1);
  await until(() => events.length === 1, { ...FAKE_WAIT, what: 'the final' });
  t.is(events[0]!.text, 'Hello there.');
  t.is(fake.finalTimings[0]!.sentAtMs! - fake.finalTimings[0]!.triggeredAtMs, 150);
  const closing = stream.close();
  await clock.advance(10);
  await closing;
});

test('an abort during the connection attempt rejects with an AbortError and leaves no session', async (t) => {
  const { fake, service } = await setup(t);
  const already = new AbortController();
  already.abort();
  t.true(isAbortError(await t.throwsAsync(service.connect(OPTIONS, already.signal))));

  const controller = new AbortController();
  const attempt = service.connect(OPTIONS, controller.signal);
  controller.abort();
  const err = await t.throwsAsync(attempt);
  t.true(isAbortError(err), `got ${err?.name}: ${err?.message}`);
  await until(() => fake.connections.every((c) => c.closeCode !== undefined), { ...FAKE_WAIT, what: 'any socket that got through to be closed' });
  t.true(fake.connections.every((c) => c.closeCode !== undefined), 'any socket that got through was closed');
});

test('aborting the connect signal after the stream opened does not end the session', async (t) => {
  const { service } = await setup(t);
  const controller = new AbortController();
  const stream = await service.connect(OPTIONS, controller.signal);
  let failed: unknown;
  const events: TranscriptEvent[] = [];
  stream.transcripts.subscribe({ next: (e) => events.push(e), error: (e) => (failed = e) });
  controller.abort();
  send(stream, voice(600), silence(400));
  await until(() => events.some((e) => e.final), { ...FAKE_WAIT, what: 'final' });
  t.is(failed, undefined);
  await stream.close();
});

test('through the STT processor: a drop mid-utterance is reconnected and the utterance still transcribed once', async (t) => {
  const { fake, service } = await setup(t, { script: ['Hello there.', 'Second sentence, after the drop.'] });
  const stt = new STTProcessor(service, { reconnectBaseMs: 50, language: 'en' });
  const below = new CaptureProcessor('downstream', new Set(HARNESS_IGNORED));
  const worker = new PipelineWorker(new Pipeline([stt, below]), { clock: new RealClock(), audioInSampleRate: RATE, idleTimeoutMs: null, heartbeatMs: null });
  const finished = worker.run();
  const finals = () => below.frames.filter((f) => f.type === 'transcription' && f.final).map((f) => (f as { text: string }).text);
  const feed = (pcm: Int16Array) => {
    for (let at = 0; at < pcm.length; at += RATE / 50) worker.queueFrame(frame('input-audio', { pcm: pcm.subarray(at, at + RATE / 50), sampleRate: RATE, channels: 1 }));
  };
  await until(() => fake.connections.length === 1, { ...FAKE_WAIT, what: 'the first connection' });
  // The processor sends audio once its stream is open (it does not replay what came before):
  // silence until the fake hears it (a 200 ms sleep stood in for the opening, and a loaded
  // machine can take longer).
  await until(() => {
    if (fake.connections[0]!.audioBytes > 0) return true;
    feed(silence(20));
    return false;
  }, { ...FAKE_WAIT, intervalMs: 20, what: 'the stream open: audio reaching the fake' });

  feed(voice(700));
  feed(silence(400));
  await until(() => finals().length === 1, { ...FAKE_WAIT, what: 'the first final' });
  feed(voice(500)); // the second utterance begins...
  await until(() => fake.connections[0]!.audioBytes >= (1600 * RATE * 2) / 1000, { ...FAKE_WAIT, what: 'the audio to arrive' });
  fake.drop(); // ...and the connection drops before it is finalised
  await until(() => fake.connections.length === 2, { ...FAKE_WAIT, what: 'the reconnection' });
  feed(voice(500));
  feed(silence(400));
  await until(() => finals().length === 2, { ...FAKE_WAIT, what: 'the second final' });

  t.deepEqual(finals(), ['Hello there.', 'Second sentence, after the drop.']);
  t.deepEqual(fake.finals, finals(), 'the provider finalised each utterance once');
  t.is(stt.reconnects, 1);
  t.true(fake.connections[1]!.audioBytes >= (1400 * RATE * 2) / 1000, 'the unfinished utterance was replayed on the new connection');
  void worker.end();
  await finished;
});

test('speech from the offline TTS (pauses at commas included) is cut into the scripted utterances', async (t) => {
  const sentences = ['Hello, my name is Anna, and I would like to book a table.', 'What is the weather like in Paris today?', 'Thank you, goodbye.'];
  const voiceOut = new LocalTTSService();
  const parts: Int16Array[] = [];
  for (const sentence of sentences) {
    for await (const e of voiceOut.synthesize({ text: sentence, sampleRate: RATE })) if (e.type === 'audio') parts.push(e.pcm);
    parts.push(silence(800));
  }
  const { service } = await setup(t, { script: sentences });
  const stream = await service.connect(OPTIONS);
  const events: TranscriptEvent[] = [];
  stream.transcripts.subscribe((e) => events.push(e));
  send(stream, ...parts);
  await until(() => events.filter((e) => e.final && e.text).length === 3, { ...FAKE_WAIT, timeoutMs: 10_000, what: 'three finals' });
  await stream.close();
  const finals = events.filter((e) => e.final && e.text);
  t.deepEqual(finals.map((e) => e.text), sentences);
  for (let i = 1; i < finals.length; i++) t.true(finals[i]!.startMs! >= finals[i - 1]!.endMs! + 700, 'each utterance starts after the previous one and its silence');
});

/** An STT processor on the Deepgram fake, run by a worker as in a bot; returns what the worker reported. */
async function sttOnFake(t: any, fakeOptions: DeepgramFakeOptions, sttOptions: ConstructorParameters<typeof STTProcessor>[1] = {}) {
  const { fake, service } = await setup(t, fakeOptions);
  const stt = new STTProcessor(service, { reconnectBaseMs: 20, reconnectMaxMs: 40, reconnectAttempts: 3, language: 'en', ...sttOptions });
  const worker = new PipelineWorker(new Pipeline([stt]), { clock: new RealClock(), audioInSampleRate: RATE, idleTimeoutMs: null, heartbeatMs: null });
  const errors: { code?: string; fatal: boolean; message: string }[] = [];
  worker.events$.subscribe((e) => {
    if (e.type === 'error') errors.push({ code: e.frame.code, fatal: e.frame.fatal, message: e.frame.message });
  });
  const finished = worker.run();
  t.teardown(() => void worker.cancel('test over'));
  const feed = (pcm: Int16Array) => {
    for (let at = 0; at < pcm.length; at += RATE / 50) worker.queueFrame(frame('input-audio', { pcm: pcm.subarray(at, at + RATE / 50), sampleRate: RATE, channels: 1 }));
  };
  await until(() => fake.connections.length === 1, { ...FAKE_WAIT, what: 'the first connection' });
  return { fake, stt, worker, errors, finished, feed };
}

test('policy: when Deepgram keeps closing the socket, STT gives up and the pipeline ends with a fatal stt_unavailable (no deaf bot)', async (t) => {
  // Every connection is cut as soon as 100 ms of audio reached it: each reconnect "works" and
  // drops again at once (the replayed audio is more than 100 ms).
  const { fake, stt, errors, finished, feed } = await sttOnFake(t, { dropAfterAudioMs: 100 });
  feed(voice(600));
  const outcome = await finished;
  t.is(outcome.how, 'cancelled');
  t.regex(outcome.reason ?? '', /^fatal error: speech-to-text connection lost and 3 reconnect attempts failed \(the Deepgram connection closed unexpectedly/);
  t.like(errors.at(-1), { code: 'stt_unavailable', fatal: true });
  t.true(stt.unavailable);
  t.is(fake.connections.length, 4, 'the first connection and the 3 reconnects of the budget, then no more');
});

test('policy: a connection that holds refills the reconnect budget (a drop now and then is not fatal)', async (t) => {
  const { fake, stt, errors, worker, finished, feed } = await sttOnFake(t, {}, { reconnectAttempts: 1, stableConnectionMs: 150 });
  for (let drop = 1; drop <= 3; drop++) {
    await new Promise((r) => setTimeout(r, 200)); // the connection holds longer than stableConnectionMs
    fake.drop();
    await until(() => fake.connections.length === drop + 1, { ...FAKE_WAIT, what: `reconnection ${drop}` });
  }
  feed(voice(300));
  await until(() => fake.connections.at(-1)!.audioBytes > 0, { ...FAKE_WAIT, what: 'audio on the last connection' });
  t.is(stt.reconnects, 3);
  t.false(stt.unavailable);
  t.deepEqual(errors.filter((e) => e.fatal), []);
  t.false(worker.finished);
  void worker.end();
  t.is((await finished).how, 'ended');
});

test('policy: a key refused on reconnect (401) ends the pipeline at once with a fatal stt_auth_failed, without spending the retries', async (t) => {
  const { fake, errors, finished } = await sttOnFake(t, {}, { reconnectAttempts: 5 });
  fake.refuseNext(10, 401);
  fake.drop();
  const outcome = await finished;
  t.is(outcome.how, 'cancelled');
  t.like(errors.at(-1), { code: 'stt_auth_failed', fatal: true });
  t.regex(errors.at(-1)!.message, /refused the connection: Deepgram refused the credentials \(HTTP 401\)/);
  t.is(fake.connections.length, 1, 'no connection after the refusal');
});

test('through the STT processor: a pipeline that ends while its first connection is still being opened leaves no socket open (nothing keeps the process alive)', async (t) => {
  const { fake, service } = await setup(t);
  const release = fake.holdHandshakes(); // the server is slow to accept
  t.teardown(release);
  const stt = new STTProcessor(service, { language: 'en' });
  const worker = new PipelineWorker(new Pipeline([stt]), { clock: new RealClock(), audioInSampleRate: RATE, idleTimeoutMs: null, heartbeatMs: null });
  const finished = worker.run();
  await until(() => fake.held === 1, { ...FAKE_WAIT, what: 'the connection attempt to reach the server' });
  void worker.cancel('the visitor hung up');
  await finished;
  release(); // the server accepts now
  await new Promise((r) => setTimeout(r, 500));
  t.true(fake.connections.every((c) => c.closeCode !== undefined), `open: ${fake.connections.filter((c) => c.closeCode === undefined).length} of ${fake.connections.length}`);
});
