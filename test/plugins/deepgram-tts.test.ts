/**
 * `tts:deepgram` (Aura) against the Deepgram speak wire fake: one socket for the sentences of a
 * session, Speak + Flush per sentence, Clear on interruption (and the audio still in flight then
 * dropped), a dropped socket, a refused key, rate limiting and a malformed frame.
 */
import test from 'ava';
import { Registry } from '../../core/registry.ts';
import { resample } from '../../core/audio.ts';
import type { TTSEvent } from '../../processors/services.ts';
import { DeepgramTTSError, DeepgramTTSService, deepgramPlugin } from '../../plugins/deepgram/index.ts';
import { until } from '../../testing/until.ts';
import { startDeepgramSpeakFake, type DeepgramSpeakFakeOptions } from '../fakes/deepgram-speak.ts';
import { fakeSpeech } from '../fakes/fake-voice.ts';
import { ttsOnProcessor } from './tts-on-processor.ts';

/** The fake vendor answers on loopback: waits poll every 5 ms, bounded at 5 s unless a wait says otherwise. */
const FAKE_WAIT = { timeoutMs: 5000, intervalMs: 5 } as const;
const LONG = 'This is a long sentence that the visitor is going to cut off well before it ends.';

async function setup(t: any, fakeOptions: DeepgramSpeakFakeOptions = {}, extra: Record<string, unknown> = {}) {
  const fake = await startDeepgramSpeakFake(fakeOptions);
  t.teardown(() => fake.close());
  const service = new DeepgramTTSService({ apiKey: fake.apiKey, baseUrl: fake.url, ...extra }, {});
  t.teardown(() => service.close());
  return { fake, service };
}

async function collect(iterable: AsyncIterable<TTSEvent>) {
  const parts: Int16Array[] = [];
  const rates = new Set<number>();
  for await (const e of iterable) if (e.type === 'audio') (parts.push(e.pcm), rates.add(e.sampleRate));
  const pcm = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
  parts.reduce((at, p) => (pcm.set(p, at), at + p.length), 0);
  return { pcm, rates: [...rates], chunks: parts.length };
}

test('sentences go as Speak + Flush on one socket; the audio is exactly what Deepgram sent, at the pipeline rate', async (t) => {
  const { fake, service } = await setup(t, { chunkMs: 60 });
  const first = await collect(service.synthesize({ text: 'Hello there.', sampleRate: 16_000 }));
  const second = await collect(service.synthesize({ text: 'How are you?', sampleRate: 16_000 }));
  t.deepEqual(first.pcm, (await fakeSpeech('Hello there.', 16_000)).pcm);
  t.deepEqual(second.pcm, (await fakeSpeech('How are you?', 16_000)).pcm);
  t.deepEqual(first.rates, [16_000]);
  t.true(first.chunks > 3);
  t.is(fake.connections.length, 1, 'one socket for both sentences');
  t.deepEqual(fake.connections[0]!.received, ['Speak:Hello there.', 'Flush', 'Speak:How are you?', 'Flush']);
  t.like(fake.connections[0]!.query, { model: 'aura-2-thalia-en', encoding: 'linear16', sample_rate: '16000' });
  t.is(fake.connections[0]!.headers.authorization, `Token ${fake.apiKey}`);
});

test('a rate Deepgram does not offer is asked at 24 kHz and resampled; an aura- voice_id picks the model', async (t) => {
  const { fake, service } = await setup(t);
  const out = await collect(service.synthesize({ text: 'Hi there.', sampleRate: 22_050, voiceId: 'aura-2-orion-en' }));
  t.deepEqual(out.rates, [22_050]);
  t.is(out.pcm.length, resample((await fakeSpeech('Hi there.', 24_000)).pcm, 24_000, 22_050).length);
  t.like(fake.connections[0]!.query, { model: 'aura-2-orion-en', sample_rate: '24000' });
  await collect(service.synthesize({ text: 'Again.', sampleRate: 22_050, voiceId: 'not-an-aura-voice' }));
  t.is(fake.connections[1]!.query.model, 'aura-2-thalia-en', 'another voice is another socket; a foreign id falls back to the default');
});

test('interruption mid-sentence: Clear is sent, nothing after the cut plays, and audio in flight is not leaked into the next sentence', async (t) => {
  const { fake, service } = await setup(t, { chunkMs: 40, chunkIntervalMs: 30 });
  fake.setFaults({ lateChunksAfterClear: 3 });
  const tts = ttsOnProcessor(service);
  t.teardown(() => void tts.stop());
  tts.speak(LONG);
  await until(() => tts.audio().length > 2, { ...FAKE_WAIT, what: 'the first audio' });
  tts.worker.interrupt();
  await until(() => fake.connections[0]!.sent.includes('Cleared'), { ...FAKE_WAIT, what: 'Deepgram to confirm the Clear' });
  await until(() => tts.interruptedAt() >= 0, { ...FAKE_WAIT, what: 'the interruption downstream' });
  t.deepEqual(tts.audioAfterInterruption(), []);
  t.true(fake.connections[0]!.received.includes('Clear'), 'the provider was told');
  const next = 'Right, your question.';
  tts.speak(next);
  await until(() => tts.below.frames.filter((f) => f.type === 'tts-stopped').length >= 1 && tts.audioAfterInterruption().length > 0 && fake.connections[0]!.sent.filter((s) => s === 'Flushed').length >= 1, { ...FAKE_WAIT, what: 'the next sentence' });
  await until(() => tts.below.frames.slice(tts.interruptedAt()).some((f) => f.type === 'tts-stopped'), { ...FAKE_WAIT, what: 'the next sentence to end' });
  const after = tts.audioAfterInterruption();
  const samples = after.reduce((n, f) => n + f.pcm.length, 0);
  t.is(samples, (await fakeSpeech(next, 16_000)).pcm.length, 'exactly the next sentence: the cleared audio in flight was dropped');
  t.false(after.some((f) => f.pcm.some((v) => v === 0x1111)), 'no stale frame content');
  t.deepEqual(tts.errors, []);
});

test('a Clear Deepgram never confirms: the next sentence goes on a fresh socket, whole, with no error (docs/vendors.md)', async (t) => {
  const { fake, service } = await setup(t, { chunkMs: 40, chunkIntervalMs: 30 }, { clearTimeoutMs: 300 });
  fake.setFaults({ withholdCleared: true });
  const tts = ttsOnProcessor(service);
  t.teardown(() => void tts.stop());
  tts.speak(LONG);
  await until(() => tts.audio().length > 2, { ...FAKE_WAIT, what: 'the first audio' });
  tts.worker.interrupt();
  await until(() => fake.connections[0]!.received.includes('Clear'), { ...FAKE_WAIT, what: 'the Clear at Deepgram' });
  await until(() => tts.interruptedAt() >= 0, { ...FAKE_WAIT, what: 'the interruption downstream' });
  const next = 'Right, your question.';
  tts.speak(next);
  await until(() => tts.below.frames.slice(tts.interruptedAt()).some((f) => f.type === 'tts-stopped'), { ...FAKE_WAIT, what: 'the next sentence to end' });
  t.is(fake.connections.length, 2, 'a fresh socket for the next sentence');
  const samples = tts.audioAfterInterruption().reduce((n, f) => n + f.pcm.length, 0);
  t.is(samples, (await fakeSpeech(next, 16_000)).pcm.length, 'the whole next sentence');
  t.deepEqual(tts.errors, []);
});

test('a socket dropped mid-sentence fails that sentence (tts_connection_lost, not fatal); the next opens a fresh socket', async (t) => {
  const { fake, service } = await setup(t, { chunkMs: 50 });
  fake.setFaults({ dropAfterChunks: 3 });
  const tts = ttsOnProcessor(service);
  t.teardown(() => void tts.stop());
  tts.speak('A sentence the network cuts in the middle.');
  await until(() => tts.errors.length > 0, { ...FAKE_WAIT, what: 'the error' });
  t.like(tts.errors[0], { code: 'tts_connection_lost', fatal: false });
  fake.setFaults({ dropAfterChunks: undefined });
  tts.speak('The next one works.');
  await until(() => fake.connections.length === 2 && fake.connections[1]!.sent.includes('Flushed'), { ...FAKE_WAIT, what: 'the next sentence on a new socket' });
  t.false(tts.worker.finished);
});

test('a refused key ends the pipeline with a fatal tts_auth_failed', async (t) => {
  const { fake } = await setup(t);
  const service = new DeepgramTTSService({ apiKey: 'wrong-key', baseUrl: fake.url }, {});
  const tts = ttsOnProcessor(service);
  tts.speak('Hello.');
  const outcome = await tts.finished;
  t.is(outcome.how, 'cancelled');
  t.like(tts.errors[0], { code: 'tts_auth_failed', fatal: true });
  t.regex(outcome.reason ?? '', /Deepgram refused the credentials \(HTTP 401\)/);
  t.is(fake.connections.length, 0);
});

test('rate limiting: a 429 handshake fails that sentence as tts_rate_limited (retryable), the next sentence gets through', async (t) => {
  const { fake, service } = await setup(t);
  fake.refuseNext(1, 429);
  const err = await t.throwsAsync(collect(service.synthesize({ text: 'Hi.', sampleRate: 16_000 })));
  t.true(err instanceof DeepgramTTSError);
  t.like(err, { code: 'rate_limited', status: 429, retryable: true });
  const out = await collect(service.synthesize({ text: 'Hi.', sampleRate: 16_000 }));
  t.true(out.pcm.length > 0);
});

test('a malformed frame ends the pipeline with a fatal tts_invalid_response (no crash)', async (t) => {
  const { fake, service } = await setup(t, { chunkMs: 50 });
  fake.setFaults({ malformedAt: 2 });
  const tts = ttsOnProcessor(service);
  tts.speak('Hello there, visitor.');
  const outcome = await tts.finished;
  t.is(outcome.how, 'cancelled');
  t.like(tts.errors[0], { code: 'tts_invalid_response', fatal: true });
  t.regex(outcome.reason ?? '', /Deepgram sent a speak message that is not JSON/);
});

test('the plugin registers tts:deepgram beside stt:deepgram and reads DEEPGRAM_API_KEY', async (t) => {
  const { fake } = await setup(t);
  const registry = new Registry().use(deepgramPlugin);
  t.deepEqual(registry.slugs('tts'), ['deepgram']);
  const service = new DeepgramTTSService({ baseUrl: fake.url }, { DEEPGRAM_API_KEY: fake.apiKey, DEEPGRAM_TTS_MODEL: 'aura-2-luna-en' });
  t.teardown(() => service.close());
  await collect(service.synthesize({ text: 'Yes.', sampleRate: 16_000 }));
  t.is(fake.connections[0]!.query.model, 'aura-2-luna-en');
  t.throws(() => new DeepgramTTSService({}, {}), { instanceOf: DeepgramTTSError, message: /DEEPGRAM_API_KEY/ });
});

test('the socket is closed after idleCloseMs without a sentence', async (t) => {
  const { fake, service } = await setup(t, {}, { idleCloseMs: 100 });
  await collect(service.synthesize({ text: 'Bye.', sampleRate: 16_000 }));
  await until(() => fake.connections[0]!.closeCode !== undefined, { ...FAKE_WAIT, what: 'the idle close' });
  t.true(fake.connections[0]!.received.includes('Close'));
});

test('the TTS processor closes the socket when the pipeline ends (nothing left open after a session)', async (t) => {
  const { fake, service } = await setup(t);
  const tts = ttsOnProcessor(service);
  tts.speak('Goodbye.');
  await until(() => tts.below.frames.some((f) => f.type === 'tts-stopped'), { ...FAKE_WAIT, what: 'the sentence' });
  t.is(fake.connections[0]!.closeCode, undefined, 'kept open between sentences');
  await tts.worker.end();
  await until(() => fake.connections[0]!.closeCode !== undefined, { ...FAKE_WAIT, what: 'the socket closed at the end' });
  t.true(fake.connections[0]!.received.includes('Close'));
});

test('more sentences than Deepgram flushes a minute: the next sentence goes on a fresh socket, none is refused', async (t) => {
  // The fake refuses the 21st Flush of a minute on a socket, with a Warning, as Deepgram documents.
  const { fake, service } = await setup(t);
  let samples = 0;
  for (let i = 0; i < 22; i++) samples += (await collect(service.synthesize({ text: `Sentence ${i}.`, sampleRate: 16_000 }))).pcm.length;
  t.is(fake.connections.length, 2, 'a second socket after 20 sentences on the first');
  t.deepEqual(fake.connections.map((c) => c.received.filter((m) => m === 'Flush').length), [20, 2]);
  t.false(fake.connections.some((c) => c.sent.includes('Warning')), 'no Flush refused');
  t.true(samples > 0);
});
