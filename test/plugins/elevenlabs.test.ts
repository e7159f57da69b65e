import test from 'ava';
import { holdsWithin, until } from '../../testing/until.ts';
import { Registry } from '../../core/registry.ts';
import { VirtualClock, isAbortError } from '../../core/clock.ts';
import type { PhonemeTiming, WordTiming } from '../../core/frames.ts';
import type { TTSEvent } from '../../processors/services.ts';
import { ElevenLabsTTSError, ElevenLabsTTSService, WordAligner, elevenlabsPlugin } from '../../plugins/elevenlabs/index.ts';
import { startElevenLabsFake, synthesizeFakeSpeech, type ElevenLabsFake } from '../fakes/elevenlabs.ts';
import { RealClock } from '../../core/clock.ts';
import { frame, type Frame } from '../../core/frames.ts';
import { Pipeline } from '../../core/pipeline.ts';
import { PipelineWorker } from '../../core/worker.ts';
import { CaptureProcessor, HARNESS_IGNORED } from '../../core/testing/index.ts';
import { TTSProcessor } from '../../processors/tts/tts-processor.ts';
import { providerFailure } from '../../processors/provider-failure.ts';

async function collect(iterable: AsyncIterable<TTSEvent>) {
  const audio: Int16Array[] = [];
  const words: WordTiming[] = [];
  const rates = new Set<number>();
  for await (const e of iterable) {
    if (e.type === 'audio') {
      audio.push(e.pcm);
      rates.add(e.sampleRate);
    } else if (e.type === 'words') words.push(...e.words);
  }
  const total = audio.reduce((n, a) => n + a.length, 0);
  const pcm = new Int16Array(total);
  let at = 0;
  for (const a of audio) {
    pcm.set(a, at);
    at += a.length;
  }
  return { pcm, chunks: audio.length, words, rates: [...rates] };
}

function tts(fake: ElevenLabsFake, extra: Record<string, unknown> = {}) {
  return new ElevenLabsTTSService({ apiKey: fake.apiKey, baseUrl: fake.baseUrl, ...extra });
}

function rms(pcm: Int16Array, from: number, to: number): number {
  let sum = 0;
  for (let i = from; i < to; i++) sum += pcm[i]! * pcm[i]!;
  return Math.sqrt(sum / Math.max(1, to - from));
}

const TEXT = 'Hello there, how are you today?';

for (const rate of [16000, 22050, 24000, 44100]) {
  test(`streams int16 PCM at ${rate} Hz exactly as the service produced it`, async (t) => {
    const fake = await startElevenLabsFake();
    t.teardown(() => fake.close());
    const out = await collect(tts(fake).synthesize({ text: TEXT, sampleRate: rate }));
    const expected = synthesizeFakeSpeech(TEXT, rate).pcm;
    t.deepEqual(out.rates, [rate]);
    t.true(out.chunks > 1, 'audio arrived in several chunks');
    t.is(out.pcm.length, expected.length);
    t.deepEqual(out.pcm, expected);
    t.is(fake.requests[0]!.query.output_format, `pcm_${rate}`);
  });
}

test('a rate ElevenLabs does not offer is requested at the next offered rate', async (t) => {
  const fake = await startElevenLabsFake();
  t.teardown(() => fake.close());
  const out = await collect(tts(fake).synthesize({ text: 'Hi.', sampleRate: 32000 }));
  t.deepEqual(out.rates, [44100]);
  t.is(fake.requests[0]!.query.output_format, 'pcm_44100');
});

test('word timings follow the text, are ordered, and sit on the voiced audio', async (t) => {
  const fake = await startElevenLabsFake({ chunkMs: 90 });
  t.teardown(() => fake.close());
  const rate = 24000;
  const out = await collect(tts(fake).synthesize({ text: TEXT, sampleRate: rate }));
  t.deepEqual(out.words.map((w) => w.word), TEXT.split(' '));
  const durationMs = (out.pcm.length / rate) * 1000;
  let previousEnd = 0;
  for (const w of out.words) {
    t.true(w.startMs >= previousEnd, `${w.word} starts after the previous word ends`);
    t.true(w.endMs > w.startMs);
    t.true(w.endMs <= durationMs + 1);
    previousEnd = w.endMs;
    // The first letter of each word is voiced; the space before it (if any) is silent.
    const s = Math.round((w.startMs / 1000) * rate);
    t.true(rms(out.pcm, s + 60, s + 600) > 1000, `${w.word} is audible where the timing says`);
  }
  for (let i = 1; i < out.words.length; i++) {
    const gapStart = Math.round((out.words[i - 1]!.endMs / 1000) * rate);
    const gapEnd = Math.round((out.words[i]!.startMs / 1000) * rate);
    if (gapEnd - gapStart > 40) t.true(rms(out.pcm, gapStart + 10, gapEnd - 10) < 50, 'the gap between words is silent');
  }
});

test('the word aligner joins a word split across chunks', (t) => {
  const aligner = new WordAligner();
  const first = aligner.push({ characters: ['H', 'e', ' ', 'w', 'a'], character_start_times_seconds: [0, 0.05, 0.1, 0.13, 0.18], character_end_times_seconds: [0.05, 0.1, 0.13, 0.18, 0.23] });
  t.deepEqual(first, [{ word: 'He', startMs: 0, endMs: 100 }]);
  const second = aligner.push({ characters: ['s', '.'], character_start_times_seconds: [0.23, 0.28], character_end_times_seconds: [0.28, 0.4] });
  t.deepEqual(second, []);
  t.deepEqual(aligner.flush(), [{ word: 'was.', startMs: 130, endMs: 400 }]);
  t.deepEqual(aligner.flush(), []);
});

test('voice, model and language reach the service; the request voice wins over the default', async (t) => {
  const fake = await startElevenLabsFake();
  t.teardown(() => fake.close());
  const service = tts(fake, { voiceId: 'default-voice', model: 'eleven_turbo_v2_5', voiceSettings: { stability: 0.4 } });
  await collect(service.synthesize({ text: 'Bonjour.', sampleRate: 16000, language: 'fr-FR', voiceId: 'agent-voice' }));
  await collect(service.synthesize({ text: 'Salut.', sampleRate: 16000 }));
  t.is(fake.requests[0]!.voiceId, 'agent-voice');
  t.is(fake.requests[0]!.body.model_id, 'eleven_turbo_v2_5');
  t.is(fake.requests[0]!.body.language_code, 'fr');
  t.deepEqual(fake.requests[0]!.body.voice_settings, { stability: 0.4 });
  t.is(fake.requests[0]!.headers['xi-api-key'], fake.apiKey);
  t.is(fake.requests[1]!.voiceId, 'default-voice');
});

test('empty text makes no request and yields nothing', async (t) => {
  const fake = await startElevenLabsFake();
  t.teardown(() => fake.close());
  const out = await collect(tts(fake).synthesize({ text: '   ', sampleRate: 16000 }));
  t.is(out.pcm.length, 0);
  t.is(fake.requests.length, 0);
});

test('aborting mid-stream throws an AbortError and closes the HTTP stream', async (t) => {
  const fake = await startElevenLabsFake({ chunkMs: 50, chunkIntervalMs: 20 });
  t.teardown(() => fake.close());
  const controller = new AbortController();
  let chunks = 0;
  const err = await t.throwsAsync(async () => {
    for await (const e of tts(fake).synthesize({ text: TEXT, sampleRate: 16000, signal: controller.signal })) {
      if (e.type === 'audio' && ++chunks === 2) controller.abort();
    }
  });
  t.true(isAbortError(err), `got ${err?.name}: ${err?.message}`);
  await until(() => fake.clientAborts > 0, { timeoutMs: 1000, what: 'the fake to see the client abort' });
  t.is(fake.clientAborts, 1);
});

test('a wrong key fails with auth_failed and ElevenLabs\' own message', async (t) => {
  const fake = await startElevenLabsFake();
  t.teardown(() => fake.close());
  const service = new ElevenLabsTTSService({ apiKey: 'wrong', baseUrl: fake.baseUrl });
  const err = await t.throwsAsync(collect(service.synthesize({ text: 'Hi', sampleRate: 16000 })), { instanceOf: ElevenLabsTTSError });
  t.is(err!.code, 'auth_failed');
  t.is(err!.status, 401);
  t.regex(err!.message, /Invalid API key \(invalid_api_key\)/);
});

test('an account out of credits (401 quota_exceeded) is quota_exceeded, not a bad key; the pipeline ends with a fatal tts_quota_exceeded', async (t) => {
  const fake = await startElevenLabsFake();
  t.teardown(() => fake.close());
  fake.setFaults({ quotaExceeded: true });
  const err = await t.throwsAsync(collect(tts(fake).synthesize({ text: 'Hi', sampleRate: 16000 })), { instanceOf: ElevenLabsTTSError });
  t.is(err!.code, 'quota_exceeded');
  t.is(err!.status, 401);
  t.regex(err!.message, /refused to synthesise for this account .*exceeds your quota.*\(quota_exceeded\)/);
  t.false(err!.retryable);
  t.deepEqual(providerFailure('tts', err), { code: 'tts_quota_exceeded', fatal: true, message: err!.message });
});

test('a connection dropped mid-stream surfaces as connection_lost after the audio already sent', async (t) => {
  const fake = await startElevenLabsFake({ chunkMs: 100, dropAfterChunks: 5 });
  t.teardown(() => fake.close());
  let samples = 0;
  const err = await t.throwsAsync(async () => {
    for await (const e of tts(fake).synthesize({ text: TEXT, sampleRate: 16000 })) if (e.type === 'audio') samples += e.pcm.length;
  }, { instanceOf: ElevenLabsTTSError });
  t.is(err!.code, 'connection_lost');
  t.true(samples > 0, 'audio of the words completed before the drop was delivered');
  t.true(samples <= 5 * 1600, 'no more than the five chunks sent');
});

test('the plugin registers tts:elevenlabs and reads ELEVENLABS_API_KEY', async (t) => {
  const fake = await startElevenLabsFake();
  t.teardown(() => fake.close());
  const registry = new Registry().use(elevenlabsPlugin);
  t.deepEqual(registry.slugs('tts'), ['elevenlabs']);
  const made = registry.create<ElevenLabsTTSService>('tts', 'elevenlabs', { apiKey: fake.apiKey, baseUrl: fake.baseUrl, voiceId: 'v1' });
  t.is(made.voiceId, 'v1');
  const fromEnv = new ElevenLabsTTSService({ baseUrl: fake.baseUrl }, { ELEVENLABS_API_KEY: fake.apiKey });
  const out = await collect(fromEnv.synthesize({ text: 'Yes.', sampleRate: 16000 }));
  t.true(out.pcm.length > 0);
  t.throws(() => new ElevenLabsTTSService({}, {}), { instanceOf: ElevenLabsTTSError, message: /ELEVENLABS_API_KEY/ });
});

test('the fake holds the first audio back for firstAudioDelayMs on its clock', async (t) => {
  const clock = new VirtualClock();
  const fake = await startElevenLabsFake({ clock, firstAudioDelayMs: 100 });
  t.teardown(() => fake.close());
  let audio = 0;
  const done = (async () => {
    for await (const e of tts(fake).synthesize({ text: 'Late.', sampleRate: 16000 })) if (e.type === 'audio') audio++;
  })();
  await holdsWithin(() => fake.requests.length > 0, { timeoutMs: 1000, intervalMs: 5 });
  await clock.advance(99);
  await new Promise((r) => setTimeout(r, 50));
  t.is(audio, 0, 'nothing before the configured latency');
  await clock.advance(1);
  await done;
  t.true(audio > 0);
  t.is(fake.requests[0]!.firstAudioAtMs! - fake.requests[0]!.receivedAtMs, 100);
});

test('every word is yielded before the audio it starts in, even when chunks split words', async (t) => {
  const fake = await startElevenLabsFake({ chunkMs: 45 });
  t.teardown(() => fake.close());
  const rate = 16000;
  let audioMs = 0;
  const words: WordTiming[] = [];
  for await (const e of tts(fake).synthesize({ text: 'Extraordinarily long words straddle chunk boundaries constantly.', sampleRate: rate })) {
    if (e.type === 'audio') audioMs += (e.pcm.length / rate) * 1000;
    else if (e.type === 'words') {
      for (const w of e.words) t.true(w.startMs >= audioMs, `${w.word} at ${w.startMs} ms came after audio up to ${audioMs} ms`);
      words.push(...e.words);
    }
  }
  t.is(words.length, 7);
  t.is(Math.round(audioMs), Math.round((synthesizeFakeSpeech('Extraordinarily long words straddle chunk boundaries constantly.', rate).pcm.length / rate) * 1000));
});

test('through the TTS processor: every word lands on the tts-audio frame it starts in, at the output rate', async (t) => {
  const fake = await startElevenLabsFake({ chunkMs: 70 });
  t.teardown(() => fake.close());
  const text = 'Welcome back, your order has shipped and arrives tomorrow.';
  const processor = new TTSProcessor(tts(fake), { voiceId: 'agent-voice' });
  const below = new CaptureProcessor('downstream', new Set(HARNESS_IGNORED));
  const worker = new PipelineWorker(new Pipeline([processor, below]), { clock: new RealClock(), audioOutSampleRate: 48000, idleTimeoutMs: null, heartbeatMs: null });
  const finished = worker.run();
  worker.queueFrame(frame('tts-speak', { text }));
  const audio = () => below.frames.filter((f): f is Frame & { type: 'tts-audio' } => f.type === 'tts-audio');
  const expectedSamples = Math.round((synthesizeFakeSpeech(text, 48000).pcm.length));
  await holdsWithin(() => audio().reduce((n, f) => n + f.pcm.length, 0) >= expectedSamples, { timeoutMs: 3000 });
  void worker.end();
  await finished;

  const frames = audio();
  t.true(frames.every((f) => f.sampleRate === 48000));
  t.is(fake.requests[0]!.query.output_format, 'pcm_48000');
  t.is(fake.requests[0]!.voiceId, 'agent-voice');
  t.deepEqual(frames.flatMap((f) => (f.words ?? []).map((w) => w.word)), text.split(' '));
  t.is(frames.reduce((n, f) => n + f.pcm.length, 0), expectedSamples);
  // The letters' sounds ride on the frames too (welcome, back, shipped, tomorrow), for the face.
  t.deepEqual(frames.flatMap((f) => (f.phonemes ?? []).map((p) => p.phoneme)).filter((p) => /^[mbp]$/.test(p)), ['m', 'b', 'p', 'm']);
});

test('an unparseable stream line fails with invalid_response instead of crashing', async (t) => {
  const fake = await startElevenLabsFake({ chunkMs: 100, malformedChunkAt: 2 });
  t.teardown(() => fake.close());
  const err = await t.throwsAsync(collect(tts(fake).synthesize({ text: TEXT, sampleRate: 16000 })), { instanceOf: ElevenLabsTTSError });
  t.is(err!.code, 'invalid_response');
});

test('the face gets sounds from the character alignment, each before the audio it starts in, timed by its letters', async (t) => {
  const fake = await startElevenLabsFake({ chunkMs: 45 });
  t.teardown(() => fake.close());
  const rate = 16000;
  const text = 'Maybe we should move, Bob.';
  let audioMs = 0;
  const phonemes: PhonemeTiming[] = [];
  const words: WordTiming[] = [];
  for await (const e of tts(fake).synthesize({ text, sampleRate: rate })) {
    if (e.type === 'audio') audioMs += (e.pcm.length / rate) * 1000;
    else if (e.type === 'words') words.push(...e.words);
    else if (e.type === 'phonemes') {
      for (const p of e.phonemes) t.true(p.startMs >= audioMs - 1e-6, `${p.phoneme} at ${p.startMs} ms came after audio up to ${audioMs} ms`);
      phonemes.push(...e.phonemes);
    }
  }
  // The visible classes: closures on every m and b, rounding on "ou"/"o" of should/move, spread on "we".
  t.deepEqual(phonemes.filter((p) => /^[mbp]$/.test(p.phoneme)).map((p) => p.phoneme), ['m', 'b', 'm', 'b', 'b']);
  t.true(phonemes.some((p) => p.phoneme === 'u'), 'move: rounded');
  t.true(phonemes.some((p) => p.phoneme === 'i'), 'we: spread');
  // Each sound sits inside its word, in order, without overlap.
  for (let i = 1; i < phonemes.length; i++) t.true(phonemes[i]!.startMs >= phonemes[i - 1]!.endMs - 1e-6);
  const move = words.find((w) => w.word.startsWith('move'))!;
  const inMove = phonemes.filter((p) => p.startMs >= move.startMs - 1 && p.endMs <= move.endMs + 1).map((p) => p.phoneme);
  t.deepEqual(inMove, ['m', 'u', 'v']);
});

test('soundsFromCharacters: false gives no sounds (the face reads the audio alone)', async (t) => {
  const fake = await startElevenLabsFake();
  t.teardown(() => fake.close());
  let sounds = 0, audio = 0;
  for await (const e of tts(fake, { soundsFromCharacters: false }).synthesize({ text: TEXT, sampleRate: 16000 })) {
    if (e.type === 'phonemes') sounds++;
    else if (e.type === 'audio') audio++;
  }
  t.is(sounds, 0);
  t.true(audio > 0);
});
