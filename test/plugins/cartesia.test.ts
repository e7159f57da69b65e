/**
 * `tts:cartesia` against the Cartesia WebSocket wire fake (TLS, as the SDK forces wss://): word
 * and phoneme timestamps that reach the frames (and so the face and the context), an interruption
 * that cancels the context, a dropped socket, a refused key, rate limiting, a malformed frame, and
 * in a whole voice pipeline a barge-in after which the context keeps only the words heard.
 */
import test from 'ava';
import { concat, silence, VirtualClock } from '../../core/index.ts';
import { Registry } from '../../core/registry.ts';
import { resample } from '../../core/audio.ts';
import type { TTSEvent } from '../../processors/services.ts';
import { Conversation } from '../../testing/index.ts';
import { createVoicePipeline } from '../../agent/voice-pipeline.ts';
import { MemoryMediaSink } from '../../transports/media-sink.ts';
import { CartesiaTTSError, CartesiaTTSService, cartesiaPlugin } from '../../plugins/cartesia/index.ts';
import { DeepgramSTTService } from '../../plugins/deepgram/index.ts';
import { OpenAILLMService } from '../../plugins/openai/llm.ts';
import { LocalTTSService } from '../../plugins/local/local-tts.ts';
import { WebRtcVADAnalyzer } from '../../plugins/local/webrtc-vad.ts';
import { until } from '../../testing/until.ts';
import { startCartesiaFake, type CartesiaFake, type CartesiaFakeOptions } from '../fakes/cartesia.ts';
import { startDeepgramFake } from '../fakes/deepgram.ts';
import { fakeSpeech } from '../fakes/fake-voice.ts';
import { startOpenAIFake } from '../fakes/openai.ts';
import { ttsOnProcessor } from './tts-on-processor.ts';

/** The fake vendor answers on loopback: waits poll every 5 ms, bounded at 5 s unless a wait says otherwise. */
const FAKE_WAIT = { timeoutMs: 5000, intervalMs: 5 } as const;
const TEXT = 'Hello there, how are you today?';
const LONG = 'This is a long sentence that the visitor is going to cut off well before it ends.';

async function setup(t: any, fakeOptions: CartesiaFakeOptions = {}, extra: Record<string, unknown> = {}) {
  const fake = await startCartesiaFake(fakeOptions);
  t.teardown(() => fake.close());
  const service = make(fake, extra);
  t.teardown(() => service.close());
  return { fake, service };
}
const make = (fake: CartesiaFake, extra: Record<string, unknown> = {}) => new CartesiaTTSService({ apiKey: fake.apiKey, baseUrl: fake.baseUrl, tls: { ca: fake.ca }, ...extra }, {});

async function collect(iterable: AsyncIterable<TTSEvent>) {
  const events: TTSEvent[] = [];
  for await (const e of iterable) events.push(e);
  const audio = events.flatMap((e) => (e.type === 'audio' ? [e.pcm] : []));
  return { events, pcm: concat(audio), rates: [...new Set(events.flatMap((e) => (e.type === 'audio' ? [e.sampleRate] : [])))] };
}

test('audio, word and phoneme timings as Cartesia sent them; every timing yielded before the audio it starts in', async (t) => {
  const { fake, service } = await setup(t, { chunkMs: 45 });
  const out = await collect(service.synthesize({ text: TEXT, sampleRate: 16_000, language: 'en-GB' }));
  const expected = await fakeSpeech(TEXT, 16_000);
  t.deepEqual(out.pcm, expected.pcm);
  t.deepEqual(out.rates, [16_000]);
  const words = out.events.flatMap((e) => (e.type === 'words' ? e.words : []));
  t.deepEqual(words.map((w) => w.word), TEXT.split(' '));
  t.deepEqual(words.map((w) => w.startMs), expected.words.map((w) => Math.round(w.startMs)));
  const phonemes = out.events.flatMap((e) => (e.type === 'phonemes' ? e.phonemes : []));
  t.is(phonemes.length, expected.phonemes.length);
  let audioMs = 0;
  for (const e of out.events) {
    if (e.type === 'audio') audioMs += (e.pcm.length / 16_000) * 1000;
    else for (const x of e.type === 'words' ? e.words : e.phonemes) t.true(x.startMs >= audioMs - 0.5, `a timing at ${x.startMs} ms came after audio up to ${audioMs} ms`);
  }
  const request = fake.connections[0]!.requests[0]!;
  t.like(request, { model_id: 'sonic-3', transcript: TEXT, language: 'en', continue: false, add_timestamps: true, add_phoneme_timestamps: true, output_format: { container: 'raw', encoding: 'pcm_s16le', sample_rate: 16_000 }, voice: { mode: 'id', id: 'a0e99841-438c-4a64-b679-ae501e7d6091' } });
  t.is(fake.connections[0]!.headers.authorization, `Bearer ${fake.apiKey}`);
  t.truthy(fake.connections[0]!.headers['cartesia-version']);
});

test('one socket for the sentences of a session; a voice id picks the voice; another rate is resampled from 24 kHz', async (t) => {
  const { fake, service } = await setup(t);
  const voice = '694f9389-aac1-45b6-b726-9d9369183238';
  const out = await collect(service.synthesize({ text: 'Hi there.', sampleRate: 32_000, voiceId: voice }));
  await collect(service.synthesize({ text: 'Again.', sampleRate: 32_000, voiceId: '21m00Tcm4TlvDq8ikWAM' }));
  t.is(fake.connections.length, 1);
  t.like(fake.connections[0]!.requests[0], { voice: { id: voice }, output_format: { sample_rate: 24_000 } });
  t.is(fake.connections[0]!.requests[1]!.voice.id, 'a0e99841-438c-4a64-b679-ae501e7d6091', 'a non-Cartesia id falls back to the default voice');
  t.is(out.pcm.length, resample((await fakeSpeech('Hi there.', 24_000)).pcm, 24_000, 32_000).length);
});

test('through the TTS processor: words and phonemes ride on the tts-audio frames they start in', async (t) => {
  const { service } = await setup(t, { chunkMs: 70 });
  const tts = ttsOnProcessor(service);
  t.teardown(() => void tts.stop());
  tts.speak(TEXT);
  await until(() => tts.below.frames.some((f) => f.type === 'tts-stopped'), { ...FAKE_WAIT, what: 'the sentence' });
  const frames = tts.audio();
  t.deepEqual(frames.flatMap((f) => (f.words ?? []).map((w) => w.word)), TEXT.split(' '));
  t.true(frames.filter((f) => f.phonemes?.length).length > 5, 'phonemes reach the frames the face plays');
  for (const f of frames) for (const p of f.phonemes ?? []) t.true(p.startMs >= -0.5, `phoneme ${p.phoneme} placed ${p.startMs} ms before its frame`);
});

test('interruption mid-sentence: the context is cancelled and nothing after the cut plays', async (t) => {
  const { fake, service } = await setup(t, { chunkMs: 40, chunkIntervalMs: 30 });
  const tts = ttsOnProcessor(service);
  t.teardown(() => void tts.stop());
  tts.speak(LONG);
  await until(() => tts.audio().length > 2, { ...FAKE_WAIT, what: 'the first audio' });
  tts.worker.interrupt();
  await until(() => fake.connections[0]!.cancels.length === 1, { ...FAKE_WAIT, what: 'the cancel' });
  await until(() => tts.interruptedAt() >= 0, { ...FAKE_WAIT, what: 'the interruption downstream' });
  await new Promise((r) => setTimeout(r, 150));
  t.deepEqual(tts.audioAfterInterruption(), []);
  t.is(fake.connections[0]!.cancels[0], fake.connections[0]!.requests[0]!.context_id);
  t.false(fake.connections[0]!.sent.includes('done'), 'the generation stopped before its end');
  t.deepEqual(tts.errors, []);
});

test("a cancelled context's late error fails nothing: the sentence after the interruption is spoken whole", async (t) => {
  const { fake, service } = await setup(t, { chunkMs: 40, chunkIntervalMs: 30 });
  fake.setFaults({ lateErrorAfterCancel: true });
  const tts = ttsOnProcessor(service);
  t.teardown(() => void tts.stop());
  tts.speak(LONG);
  await until(() => tts.audio().length > 2, { ...FAKE_WAIT, what: 'the first audio' });
  tts.worker.interrupt();
  await until(() => fake.connections[0]!.cancels.length === 1, { ...FAKE_WAIT, what: 'the cancel' });
  await until(() => tts.interruptedAt() >= 0, { ...FAKE_WAIT, what: 'the interruption downstream' });
  tts.speak('Right, your question.');
  await until(() => tts.below.frames.slice(tts.interruptedAt()).some((f) => f.type === 'tts-stopped'), { ...FAKE_WAIT, what: 'the next sentence to end' });
  t.true(fake.connections[0]!.sent.includes('error'), 'the late error was sent');
  t.deepEqual(tts.errors, []);
  t.true(tts.audioAfterInterruption().length > 0, 'the next sentence was heard');
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
  await until(() => fake.connections.length === 2 && fake.connections[1]!.sent.includes('done'), { ...FAKE_WAIT, what: 'the next sentence on a new socket' });
  t.false(tts.worker.finished);
});

test('a refused key ends the pipeline with a fatal tts_auth_failed', async (t) => {
  const { fake } = await setup(t);
  const tts = ttsOnProcessor(make(fake, { apiKey: 'sk_car_wrong' }));
  tts.speak('Hello.');
  const outcome = await tts.finished;
  t.is(outcome.how, 'cancelled');
  t.like(tts.errors[0], { code: 'tts_auth_failed', fatal: true });
  t.regex(outcome.reason ?? '', /Cartesia refused the credentials; check the API key \(HTTP 401\)/);
});

test('rate limiting: a 429 handshake fails that sentence as rate_limited (retryable); the next gets through', async (t) => {
  const { fake, service } = await setup(t);
  fake.refuseNext(1, 429);
  const err = await t.throwsAsync(collect(service.synthesize({ text: 'Hi.', sampleRate: 16_000 })));
  t.true(err instanceof CartesiaTTSError);
  t.like(err, { code: 'rate_limited', status: 429, retryable: true });
  t.true((await collect(service.synthesize({ text: 'Hi.', sampleRate: 16_000 }))).pcm.length > 0);
});

test('a malformed frame ends the pipeline with a fatal tts_invalid_response (no crash)', async (t) => {
  const { fake, service } = await setup(t, { chunkMs: 50 });
  fake.setFaults({ malformedAt: 2 });
  const tts = ttsOnProcessor(service);
  tts.speak('Hello there, visitor.');
  const outcome = await tts.finished;
  t.is(outcome.how, 'cancelled');
  t.like(tts.errors[0], { code: 'tts_invalid_response', fatal: true });
  t.regex(outcome.reason ?? '', /Cartesia sent a message that is not JSON/);
});

test('a generation Cartesia refuses (unknown model) is a bad_request with its title and message', async (t) => {
  const { service } = await setup(t, {}, { model: 'sonic-99' });
  const err = await t.throwsAsync(collect(service.synthesize({ text: 'Hi.', sampleRate: 16_000 })));
  t.like(err, { code: 'bad_request', status: 400, retryable: false });
  t.regex(err!.message, /Invalid model: The model is not valid/);
});

test('the plugin registers tts:cartesia and reads CARTESIA_API_KEY', async (t) => {
  const fake = await startCartesiaFake();
  t.teardown(() => fake.close());
  t.deepEqual(new Registry().use(cartesiaPlugin).slugs('tts'), ['cartesia']);
  const service = new CartesiaTTSService({ baseUrl: fake.baseUrl, tls: { ca: fake.ca } }, { CARTESIA_API_KEY: fake.apiKey, CARTESIA_TTS_MODEL: 'sonic-2' });
  t.teardown(() => service.close());
  await collect(service.synthesize({ text: 'Yes.', sampleRate: 16_000 }));
  t.is(fake.connections[0]!.requests[0]!.model_id, 'sonic-2');
  t.throws(() => new CartesiaTTSService({}, {}), { instanceOf: CartesiaTTSError, message: /CARTESIA_API_KEY/ });
});

test('in a voice pipeline: a barge-in stops Cartesia and the context keeps only the words heard', async (t) => {
  const RATE = 16_000;
  const clock = new VirtualClock();
  const long = 'Once upon a time there was a little cloud. It wandered over the hills. It met the wind. They played all day long. Then night came.';
  const [deepgram, openai, cartesia] = await Promise.all([
    startDeepgramFake({ script: ['tell me a story', 'stop please'], clock }),
    startOpenAIFake({ replies: [{ text: long }, { text: 'Okay, I stopped.' }], clock }),
    startCartesiaFake({ clock, chunkMs: 80 }),
  ]);
  t.teardown(async () => void (await Promise.all([deepgram.close(), openai.close(), cartesia.close()])));
  const tts = make(cartesia);
  t.teardown(() => tts.close());
  const voice = createVoicePipeline({
    vad: new WebRtcVADAnalyzer(),
    stt: new DeepgramSTTService({ apiKey: deepgram.apiKey, baseUrl: deepgram.url, clock }),
    llm: new OpenAILLMService({ apiKey: openai.apiKey, baseUrl: openai.baseURL }),
    tts,
    sink: new MemoryMediaSink(),
    language: 'en',
    vadOptions: { stopMs: 400 },
  });
  const c = await Conversation.start({ pipeline: voice.processors, clock, sampleRate: RATE, realPauseMs: 1 });
  const local = new LocalTTSService();
  const speech = async (text: string) => {
    const parts: Int16Array[] = [];
    for await (const e of local.synthesize({ text, sampleRate: RATE })) if (e.type === 'audio') parts.push(e.pcm);
    return concat(parts);
  };
  await c.settle(() => deepgram.connections.length > 0, 2000);
  await c.say(concat([await speech('Tell me a story.'), silence(600, RATE)]));
  t.true(await c.settle(() => voice.output.botSpeaking, 20_000));
  for (let i = 0; i < 75; i++) await c.step(); // about 1.5 s of the story
  const stop = await speech('Stop, please.');
  await c.say(stop.subarray(0, Math.floor(stop.length / 2)));
  t.false(voice.output.botSpeaking, 'the bot went quiet while the user spoke');
  await c.say(concat([stop.subarray(Math.floor(stop.length / 2)), silence(600, RATE)]));
  t.true(await c.settle(() => voice.context.length >= 4 && !voice.output.botSpeaking, 20_000));
  const [, , told, , answer] = voice.context.messages().map((m) => m.content ?? '');
  t.true(long.startsWith(told!.replace(/\s+$/, '')), `"${told}" is a prefix of the story`);
  t.true(told!.length > 0 && told!.length < long.length / 2, `only what was heard is in the context: "${told}"`);
  t.is(answer, 'Okay, I stopped.');
  // Synthesis runs ahead of playback: what was cut here is playback (the cancel at Cartesia mid-generation is the test above).
  t.true(cartesia.connections.flatMap((x) => x.requests).length >= 2, 'the story went to Cartesia sentence by sentence');
  await c.worker.cancel();
});
