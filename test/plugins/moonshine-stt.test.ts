/**
 * `stt:moonshine`: the Moonshine tiny model (from npm) in its worker thread, fed as a pipeline
 * feeds an STT: 20 ms chunks, `finalize()` when the VAD says the user stopped.
 */
import { readFileSync } from 'node:fs';
import test from 'ava';
import { chunkAudio, concat, silence } from '../../core/audio.ts';
import type { STTStream, STTStreamOptions, TranscriptEvent } from '../../processors/services.ts';
import { LocalTTSService, MOONSHINE_MIN_SAMPLES, MoonshineEngine, MoonshineSTT, UNRECOGNISED_SPEECH, type MoonshineSTTOptions } from '../../plugins/local/index.ts';
import type { LocalEngineError } from '../../plugins/local/local-engine-error.ts';

const tts = new LocalTTSService();
/** One engine for the file (the model loads once), ended after the last test. */
const engine = new MoonshineEngine();
test.after.always(() => engine.close());

async function say(text: string, sampleRate: number, voice?: string): Promise<Int16Array> {
  const parts: Int16Array[] = [];
  for await (const e of new LocalTTSService(voice ? { voice } : {}).synthesize({ text, sampleRate, language: 'en' })) if (e.type === 'audio') parts.push(e.pcm);
  return concat(parts);
}

/** A recording of human read speech (Debian's pocketsphinx-testdata, installed by the pretest), 16 kHz mono. */
function human(id: string): Int16Array {
  const b = readFileSync(`/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-${id}.wav`);
  return new Int16Array(b.buffer.slice(b.byteOffset + 44, b.byteOffset + b.length));
}

async function open(options: Partial<STTStreamOptions> = {}, stt: MoonshineSTTOptions = {}): Promise<{ stream: STTStream; events: TranscriptEvent[]; done: Promise<void> }> {
  const stream = await new MoonshineSTT({ engine, ...stt }).connect({ language: 'en', channels: 1, interimResults: true, sampleRate: 16000, ...options });
  const events: TranscriptEvent[] = [];
  const done = new Promise<void>((resolve, reject) => stream.transcripts.subscribe({ next: (e) => events.push(e), complete: resolve, error: reject }));
  return { stream, events, done };
}

function play(stream: STTStream, pcm: Int16Array, sampleRate: number): void {
  for (const chunk of chunkAudio(pcm, sampleRate, 20)) stream.sendAudio(chunk);
}

async function until(condition: () => boolean, what: string): Promise<void> {
  const end = Date.now() + 30_000;
  while (!condition()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

test.serial('transcribes open vocabulary, punctuated, at the pipeline rate: finals with their times', async (t) => {
  const { stream, events, done } = await open({ sampleRate: 24000 });
  for (const text of ['What is your name?', 'Tell me a joke']) {
    play(stream, concat([silence(300, 24000), await say(text, 24000), silence(300, 24000)]), 24000);
    stream.finalize();
  }
  await stream.close();
  await done;
  const finals = events.filter((e) => e.final);
  t.deepEqual(finals.map((e) => e.text), ['What is your name?', 'Tell me a joke.']);
  for (const e of finals) {
    t.true(e.endOfUtterance === true);
    t.is(e.language, 'en');
    t.true((e.confidence ?? 0) > 0.5 && (e.confidence ?? 0) <= 1, `confidence ${e.confidence}`);
    t.true(e.startMs! < e.endMs!);
  }
  t.true(finals[0]!.endMs! <= finals[1]!.startMs!, 'utterance times follow the audio');
});

test.serial('transcribes a human voice, which the phrase-list stand-in cannot', async (t) => {
  const { stream, events, done } = await open();
  play(stream, concat([silence(200, 16000), human('0930'), silence(300, 16000)]), 16000);
  stream.finalize();
  await stream.close();
  await done;
  const final = events.find((e) => e.final);
  t.truthy(final);
  // "He might even have been made amiable himself."
  t.regex(final!.text.toLowerCase(), /might even have been made amiable himself/);
});

test.serial('sends the words so far as an interim result after a short silence, and the final reuses them', async (t) => {
  const { stream, events, done } = await open();
  play(stream, concat([silence(200, 16000), await say('My name is', 16000)]), 16000);
  t.is(events.length, 0, 'nothing while the speech goes on');
  // 350 ms of silence: past interimSilenceMs (100) once the VAD's hangover is over, short of autoEndpointMs (1000).
  play(stream, silence(350, 16000), 16000);
  await until(() => events.length > 0, 'the interim result');
  t.false(events[0]!.final);
  t.regex(events[0]!.text, /^My name is\b/);
  stream.finalize();
  await stream.close();
  await done;
  t.is(events.length, 2);
  t.true(events[1]!.final);
  t.is(events[1]!.text, events[0]!.text, 'no speech since the interim: the final is the same text');
});

test.serial('speech after an interim result is recognised again with it: the final holds every word', async (t) => {
  const { stream, events, done } = await open();
  play(stream, concat([silence(200, 16000), await say('Could you tell me', 16000), silence(350, 16000)]), 16000);
  await until(() => events.length > 0, 'the interim result');
  play(stream, concat([await say('the weather tomorrow?', 16000), silence(300, 16000)]), 16000);
  stream.finalize();
  await stream.close();
  await done;
  const final = events.find((e) => e.final)!;
  // Words of both pieces (espeak's "the weather" after a pause is heard as other words).
  t.regex(final.text.toLowerCase(), /tell me.*tomorrow/);
  t.false(events.some((e) => !e.final && /weather/i.test(e.text) && events.indexOf(e) > events.indexOf(final)), 'no interim after its final');
});

test.serial('no interim results when the pipeline does not ask for them', async (t) => {
  const { stream, events, done } = await open({ interimResults: false });
  play(stream, concat([silence(200, 16000), await say('Thank you', 16000), silence(400, 16000)]), 16000);
  await new Promise((r) => setTimeout(r, 300));
  stream.finalize();
  await stream.close();
  await done;
  t.deepEqual(events.map((e) => e.final), [true]);
});

test.serial('a click and a hum yield no words: unrecognised speech with confidence 0, or nothing when asked', async (t) => {
  // A 50 ms click (the VAD's hangover makes it an utterance) and 600 ms of a loud, flat 120 Hz hum.
  const hum = new Int16Array(16000 * 0.6).map((_, i) => Math.round(12000 * Math.sin((2 * Math.PI * 120 * i) / 16000)));
  const click = new Int16Array(16000 * 0.05).fill(20000);
  for (const unrecognised of ['placeholder', 'ignore'] as const) {
    const { stream, events, done } = await open({}, { unrecognised });
    for (const noise of [click, hum]) {
      play(stream, concat([silence(200, 16000), noise, silence(300, 16000)]), 16000);
      stream.finalize();
    }
    await stream.close();
    await done;
    const finals = events.filter((e) => e.final);
    if (unrecognised === 'ignore') t.deepEqual(finals, []);
    else {
      t.true(finals.length >= 1);
      for (const f of finals) t.like(f, { text: UNRECOGNISED_SPEECH, confidence: 0 });
    }
  }
});

test.serial('bad options and streams are refused with the engines\' errors', async (t) => {
  const stt = new MoonshineSTT({ engine });
  const fr = await t.throwsAsync(stt.connect({ language: 'fr', channels: 1, interimResults: true, sampleRate: 16000 }));
  t.is((fr as LocalEngineError).code, 'unsupported_language');
  const stereo = await t.throwsAsync(stt.connect({ language: 'en', channels: 2, interimResults: true, sampleRate: 16000 }));
  t.is((stereo as LocalEngineError).code, 'invalid_options');
  const rate = await t.throwsAsync(stt.connect({ language: 'en', channels: 1, interimResults: true, sampleRate: 4000 }));
  t.is((rate as LocalEngineError).code, 'unsupported_sample_rate');
  t.is(t.throws(() => new MoonshineSTT({ padMs: -1 }))!.message, 'padMs must be a number of at least 0, got -1');
  t.is((t.throws(() => new MoonshineSTT({ unrecognised: 'drop' as never })) as LocalEngineError).code, 'invalid_options');
  t.is((t.throws(() => new MoonshineSTT({ minConfidence: 2 })) as LocalEngineError).code, 'invalid_options');
  t.is((t.throws(() => new MoonshineSTT({ interimSilenceMs: 0 })) as LocalEngineError).code, 'invalid_options');
  t.is((t.throws(() => new MoonshineEngine({ model: 'huge' as never })) as LocalEngineError).code, 'invalid_options');
  t.is((t.throws(() => new MoonshineEngine({ threads: 0 })) as LocalEngineError).code, 'invalid_options');
});

test.serial('a closed engine fails the recognitions waiting on it and starts again when asked', async (t) => {
  const own = new MoonshineEngine();
  await own.start();
  const audio = new Float32Array(16000);
  const waiting = own.transcribe(audio.slice(), 8);
  await own.close();
  const err = await t.throwsAsync(waiting);
  t.is((err as LocalEngineError).code, 'engine_failure');
  const again = await own.transcribe(new Float32Array(16000), 8);
  t.is(typeof again.text, 'string');
  await own.close();
});

test.serial('audio too short for the encoder, or already handed to the worker, is no words (not an engine error, not a wait that never ends)', async (t) => {
  for (const n of [0, 10, MOONSHINE_MIN_SAMPLES - 1]) t.deepEqual(await engine.transcribe(new Float32Array(n), 8), { text: '', tokens: 0, confidence: 0, ms: 0 }, `${n} samples`);
  const audio = new Float32Array(MOONSHINE_MIN_SAMPLES);
  const first = await engine.transcribe(audio, 8);
  t.true(first.tokens >= 0 && typeof first.text === 'string', 'the shortest audio the encoder takes is recognised');
  t.is(audio.length, 0, 'its buffer went to the worker');
  t.is((await engine.transcribe(audio, 8)).tokens, 0, 'the same array again is no words');
});
