/**
 * `tts:openai` against the OpenAI audio wire fake: `/v1/audio/speech` streamed as raw PCM,
 * resampled to the pipeline's rate, voices and model settable, and through the TTS processor an
 * interruption mid-sentence, a dropped stream, a refused key, rate limiting and a malformed answer.
 */
import test from 'ava';
import { Registry } from '../../core/registry.ts';
import { isAbortError } from '../../core/clock.ts';
import { resample } from '../../core/audio.ts';
import type { TTSEvent } from '../../processors/services.ts';
import { OpenAIAudioError, OpenAITTSService, openaiPlugin } from '../../plugins/openai/index.ts';
import { until } from '../../testing/until.ts';
import { fakeSpeech } from '../fakes/fake-voice.ts';
import { startOpenAIAudioFake, type OpenAIAudioFakeOptions } from '../fakes/openai-audio.ts';
import { ttsOnProcessor } from './tts-on-processor.ts';

const TEXT = 'Hello there, how are you today?';
/** The fake vendor answers on loopback: waits poll every 5 ms, bounded at 5 s unless a wait says otherwise. */
const FAKE_WAIT = { timeoutMs: 5000, intervalMs: 5 } as const;

async function setup(t: any, fakeOptions: OpenAIAudioFakeOptions = {}, extra: Record<string, unknown> = {}) {
  const fake = await startOpenAIAudioFake(fakeOptions);
  t.teardown(() => fake.close());
  return { fake, service: new OpenAITTSService({ apiKey: fake.apiKey, baseUrl: fake.baseURL, ...extra }, {}) };
}

async function collect(iterable: AsyncIterable<TTSEvent>) {
  const parts: Int16Array[] = [];
  const rates = new Set<number>();
  let chunks = 0;
  for await (const e of iterable) {
    if (e.type !== 'audio') continue;
    parts.push(e.pcm);
    rates.add(e.sampleRate);
    chunks++;
  }
  const pcm = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
  parts.reduce((at, p) => (pcm.set(p, at), at + p.length), 0);
  return { pcm, rates: [...rates], chunks };
}

test('24 kHz PCM streams through exactly as the server produced it, split samples joined', async (t) => {
  const { fake, service } = await setup(t, { chunkMs: 40 });
  const out = await collect(service.synthesize({ text: TEXT, sampleRate: 24_000 }));
  t.deepEqual(out.rates, [24_000]);
  t.true(out.chunks > 5, 'audio arrived as the body streamed');
  t.deepEqual(out.pcm, (await fakeSpeech(TEXT, 24_000)).pcm);
  t.like(fake.speech[0]!.body, { model: 'gpt-4o-mini-tts', voice: 'alloy', input: TEXT, response_format: 'pcm' });
});

test('another pipeline rate is resampled from 24 kHz here (the contract: audio at the requested rate)', async (t) => {
  const { service } = await setup(t);
  const out = await collect(service.synthesize({ text: TEXT, sampleRate: 16_000 }));
  t.deepEqual(out.rates, [16_000]);
  const expected = resample((await fakeSpeech(TEXT, 24_000)).pcm, 24_000, 16_000);
  t.is(out.pcm.length, expected.length);
});

test('the agent voice wins over the default; model, speed and instructions are sent', async (t) => {
  const { fake, service } = await setup(t, {}, { voice: 'coral', model: 'tts-1', speed: 1.25, instructions: 'Warm and calm.' });
  await collect(service.synthesize({ text: 'One.', sampleRate: 24_000, voiceId: 'nova' }));
  await collect(service.synthesize({ text: 'Two.', sampleRate: 24_000 }));
  t.like(fake.speech[0]!.body, { voice: 'nova', model: 'tts-1', speed: 1.25, instructions: 'Warm and calm.' });
  t.is(fake.speech[1]!.body.voice, 'coral');
});

test('a voice the server does not have is a bad_request with its message (not retried)', async (t) => {
  const { fake, service } = await setup(t);
  const err = await t.throwsAsync(collect(service.synthesize({ text: 'Hi.', sampleRate: 24_000, voiceId: '21m00Tcm4TlvDq8ikWAM' })));
  t.like(err, { code: 'bad_request', status: 400, retryable: false });
  t.regex(err!.message, /Invalid value: '21m00Tcm4TlvDq8ikWAM'/);
  t.is(fake.speech.length, 0);
});

test('a self-hosted server: any voice name, its own rate (sourceSampleRate)', async (t) => {
  const { fake, service } = await setup(t, { voices: null, sampleRate: 22_050 }, { sourceSampleRate: 22_050, voice: 'af_bella' });
  const out = await collect(service.synthesize({ text: 'Hi there.', sampleRate: 22_050 }));
  t.deepEqual(out.pcm, (await fakeSpeech('Hi there.', 22_050)).pcm);
  t.is(fake.speech[0]!.body.voice, 'af_bella');
});

test('interruption mid-sentence: no audio after the cut, and the server is told (the request is aborted)', async (t) => {
  const { fake, service } = await setup(t, { chunkMs: 40, chunkIntervalMs: 30 });
  const tts = ttsOnProcessor(service);
  t.teardown(() => void tts.stop());
  tts.speak('This is a long sentence that the visitor is going to cut off well before it ends.');
  await until(() => tts.audio().length > 0, { ...FAKE_WAIT, what: 'the first audio' });
  tts.worker.interrupt();
  await until(() => fake.speech[0]!.clientAborted, { ...FAKE_WAIT, what: 'the server to see the request aborted' });
  await until(() => tts.interruptedAt() >= 0, { ...FAKE_WAIT, what: 'the interruption downstream' });
  await new Promise((r) => setTimeout(r, 150)); // chunks the server had in flight would surface now
  t.deepEqual(tts.audioAfterInterruption(), []);
  const sentMs = (fake.speech[0]!.bytesSent / 2 / 24_000) * 1000;
  const full = (await fakeSpeech('This is a long sentence that the visitor is going to cut off well before it ends.', 24_000)).pcm.length / 24;
  t.true(sentMs < full / 2, `the server stopped after ${Math.round(sentMs)} of ${Math.round(full)} ms`);
  t.deepEqual(tts.errors, []);
});

test('an abort throws an AbortError (not a provider error)', async (t) => {
  const { service } = await setup(t, { chunkMs: 40, chunkIntervalMs: 20 });
  const controller = new AbortController();
  const err = await t.throwsAsync(async () => {
    for await (const e of service.synthesize({ text: TEXT, sampleRate: 24_000, signal: controller.signal })) if (e.type === 'audio') controller.abort();
  });
  t.true(isAbortError(err), String(err));
});

test('a stream cut mid-sentence fails that sentence (tts_connection_lost, not fatal); the next one is spoken', async (t) => {
  const { fake, service } = await setup(t, { chunkMs: 50 });
  fake.setFaults({ dropSpeechAfterChunks: 3 });
  const tts = ttsOnProcessor(service);
  t.teardown(() => void tts.stop());
  tts.speak('A sentence the server cuts off in the middle.');
  await until(() => tts.errors.length > 0, { ...FAKE_WAIT, what: 'the error' });
  t.like(tts.errors[0], { code: 'tts_connection_lost', fatal: false });
  const before = tts.audio().length;
  t.true(before > 0, 'the audio sent before the cut was played');
  fake.setFaults({ dropSpeechAfterChunks: undefined });
  tts.speak('The next one works.');
  await until(() => tts.below.frames.filter((f) => f.type === 'tts-stopped').length === 2, { ...FAKE_WAIT, what: 'the second sentence' });
  t.true(tts.audio().length > before);
  t.false(tts.worker.finished);
});

test('a refused key ends the pipeline with a fatal tts_auth_failed', async (t) => {
  const { fake } = await setup(t);
  const tts = ttsOnProcessor(new OpenAITTSService({ apiKey: 'sk-wrong-key-0000', baseUrl: fake.baseURL }, {}));
  tts.speak('Hello.');
  const outcome = await tts.finished;
  t.is(outcome.how, 'cancelled');
  t.like(tts.errors[0], { code: 'tts_auth_failed', fatal: true });
  t.regex(outcome.reason ?? '', /Incorrect API key provided/);
});

test('a 429 is retried with backoff (Retry-After) and the sentence is spoken', async (t) => {
  const { fake, service } = await setup(t);
  fake.failNext(2, 429);
  const out = await collect(service.synthesize({ text: 'Hi there.', sampleRate: 24_000 }));
  t.is(fake.failed, 2);
  t.true(out.pcm.length > 0);
  fake.failNext(5, 429);
  const err = await t.throwsAsync(collect(service.synthesize({ text: 'Again.', sampleRate: 24_000 })));
  t.like(err, { code: 'rate_limited', status: 429, retryable: true });
});

test('a 200 answer that is not audio ends the pipeline with a fatal tts_invalid_response (no crash)', async (t) => {
  const { fake, service } = await setup(t);
  fake.setFaults({ malformedSpeech: true });
  const tts = ttsOnProcessor(service);
  tts.speak('Hello.');
  const outcome = await tts.finished;
  t.is(outcome.how, 'cancelled');
  t.like(tts.errors[0], { code: 'tts_invalid_response', fatal: true });
  t.regex(outcome.reason ?? '', /sent application\/json instead of raw PCM/);
});

test('the plugin registers tts:openai; key, base URL, model and voice from the environment', async (t) => {
  const { fake } = await setup(t);
  t.deepEqual(new Registry().use(openaiPlugin).slugs('tts'), ['openai']);
  const service = new OpenAITTSService({}, { OPENAI_TTS_API_KEY: fake.apiKey, OPENAI_TTS_BASE_URL: fake.baseURL, OPENAI_BASE_URL: 'http://llm.invalid/v1', OPENAI_TTS_MODEL: 'tts-1-hd', OPENAI_TTS_VOICE: 'sage' });
  await collect(service.synthesize({ text: 'Yes.', sampleRate: 24_000 }));
  t.like(fake.speech[0]!.body, { model: 'tts-1-hd', voice: 'sage' });
  t.throws(() => new OpenAITTSService({}, {}), { instanceOf: OpenAIAudioError, message: /OPENAI_TTS_API_KEY or OPENAI_API_KEY/ });
});
