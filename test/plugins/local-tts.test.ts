import test from 'ava';
import { concat, rms } from '../../core/audio.ts';
import type { PhonemeTiming, WordTiming } from '../../core/frames.ts';
import { isAbortError } from '../../core/clock.ts';
import type { TTSEvent, TTSRequest } from '../../processors/services.ts';
import { LocalTTSService } from '../../plugins/local/local-tts.ts';
import { SILENCE_PHONEME } from '../../plugins/local/espeak-timeline.ts';
import { EspeakEngine } from '../../plugins/local/espeak-engine.ts';

interface Synthesis {
  pcm: Int16Array;
  sampleRates: Set<number>;
  phonemes: PhonemeTiming[];
  words: WordTiming[];
  events: TTSEvent[];
}

const tts = new LocalTTSService();

async function synthesize(request: Partial<TTSRequest> & { text: string }): Promise<Synthesis> {
  const out: Synthesis = { pcm: new Int16Array(0), sampleRates: new Set(), phonemes: [], words: [], events: [] };
  const parts: Int16Array[] = [];
  for await (const event of tts.synthesize({ sampleRate: 16000, ...request })) {
    out.events.push(event);
    if (event.type === 'audio') {
      parts.push(event.pcm);
      out.sampleRates.add(event.sampleRate);
    } else if (event.type === 'phonemes') out.phonemes.push(...event.phonemes);
    else out.words.push(...event.words);
  }
  out.pcm = concat(parts);
  return out;
}

const durationOf = (s: Synthesis, rate = 16000) => (s.pcm.length / rate) * 1000;

function slice(pcm: Int16Array, rate: number, startMs: number, endMs: number): Int16Array {
  return pcm.subarray(Math.floor((startMs * rate) / 1000), Math.floor((endMs * rate) / 1000));
}

test('speaks English text as audible speech of a plausible duration', async (t) => {
  const text = 'Hello there, how are you today? The weather is lovely.';
  const s = await synthesize({ text });
  const words = text.split(/\s+/).length;
  t.deepEqual([...s.sampleRates], [16000]);
  t.true(s.events.filter((e) => e.type === 'audio').length > 3, 'audio arrives in several chunks');
  t.true(durationOf(s) > words * 150 && durationOf(s) < words * 600, `duration ${durationOf(s)} ms for ${words} words`);
  t.true(rms(s.pcm) > 0.02, `rms ${rms(s.pcm)}`);
});

test('phoneme timings partition the audio, in order, and speech sits inside voiced phonemes', async (t) => {
  const s = await synthesize({ text: 'Hello there. How are you?' });
  const duration = durationOf(s);
  t.is(s.phonemes[0]!.startMs, 0);
  for (let i = 0; i < s.phonemes.length; i++) {
    const p = s.phonemes[i]!;
    t.true(p.endMs > p.startMs, `phoneme ${i} has a positive length`);
    if (i > 0) t.is(p.startMs, s.phonemes[i - 1]!.endMs, `phoneme ${i} starts where the previous ended`);
    t.false(/[ˈˌ]/.test(p.phoneme), 'stress marks are removed');
  }
  t.true(Math.abs(s.phonemes.at(-1)!.endMs - duration) < 5, `last phoneme ends at ${s.phonemes.at(-1)!.endMs}, audio lasts ${duration}`);
  const voiced = s.phonemes.filter((p) => p.phoneme !== SILENCE_PHONEME);
  const pauses = s.phonemes.filter((p) => p.phoneme === SILENCE_PHONEME && p.endMs - p.startMs > 50);
  t.true(voiced.length >= 10, `${voiced.length} voiced phonemes`);
  t.true(pauses.length >= 1, 'the sentence break is a silence');
  const energy = (list: PhonemeTiming[]) => rms(concat(list.map((p) => slice(s.pcm, 16000, p.startMs, p.endMs))));
  t.true(energy(voiced) > 5 * energy(pauses), `voiced ${energy(voiced)} vs pauses ${energy(pauses)}`);
});

test('word timings follow the text, never overlap and lie inside the audio', async (t) => {
  const s = await synthesize({ text: 'Hello there, how are you today?' });
  t.deepEqual(s.words.map((w) => w.word), ['Hello', 'there,', 'how', 'are', 'you', 'today?']);
  let previousEnd = 0;
  for (const w of s.words) {
    t.true(w.startMs >= previousEnd && w.endMs > w.startMs, JSON.stringify(w));
    previousEnd = w.endMs;
  }
  t.true(previousEnd <= durationOf(s) + 1);
  // Each word is loud: its interval really holds its speech.
  for (const w of s.words) t.true(rms(slice(s.pcm, 16000, w.startMs, w.endMs)) > 0.02, `${w.word} is audible`);
});

test('every timing arrives before the audio it starts in', async (t) => {
  let yieldedMs = 0;
  let audioEvents = 0;
  const late: string[] = [];
  for await (const event of tts.synthesize({ text: 'Timings must come first, so the mouth moves with the sound. Really.', sampleRate: 24000 })) {
    if (event.type === 'audio') {
      yieldedMs += (event.pcm.length / 24000) * 1000;
      audioEvents++;
    } else {
      const list = event.type === 'words' ? event.words : event.phonemes;
      for (const item of list) if (item.startMs < yieldedMs - 0.05) late.push(`${JSON.stringify(item)} after ${yieldedMs} ms of audio`);
    }
  }
  t.deepEqual(late, []);
  t.true(audioEvents > 3, 'audio is still streamed, not held to the end');
});

test('words are the tokens of the text, so joining them gives the text back', async (t) => {
  // espeak says "forty two" for 42, voices "I am" as one word and reads & and <3 aloud.
  for (const text of ['I have 42 cats & dogs <3', 'I am Ada, an offline stand-in assistant. How can I help you today?', 'Bonjour ! Je suis Ada.']) {
    const s = await synthesize({ text, language: text.startsWith('Bonjour') ? 'fr' : 'en' });
    t.is(s.words.map((w) => w.word).join(' '), text);
    let previousEnd = 0;
    for (const w of s.words) {
      t.true(w.startMs >= previousEnd - 1e-9 && w.endMs > w.startMs, `${text}: ${JSON.stringify(w)}`);
      previousEnd = w.endMs;
    }
  }
});

// Serial: espeak carries a little prosodic state from one text to the next, so the reference
// and the resampled versions must be synthesised back to back.
test.serial('resamples to the requested rate with the same duration', async (t) => {
  const text = 'Testing sample rates.';
  const byRate = new Map<number, Synthesis>();
  for (const rate of [8000, 16000, 22050, 24000, 48000]) byRate.set(rate, await synthesize({ text, sampleRate: rate }));
  const reference = durationOf(byRate.get(22050)!, 22050);
  for (const [rate, s] of byRate) {
    t.deepEqual([...s.sampleRates], [rate]);
    t.true(Math.abs(durationOf(s, rate) - reference) < 5, `${rate} Hz lasts ${durationOf(s, rate)} ms vs ${reference} ms`);
    t.true(rms(s.pcm) > 0.02, `${rate} Hz is audible`);
    // espeak jitters by a millisecond from run to run; the timings must not scale with the rate.
    const expected = byRate.get(22050)!.phonemes;
    t.deepEqual(s.phonemes.map((p) => p.phoneme), expected.map((p) => p.phoneme));
    t.true(s.phonemes.every((p, i) => Math.abs(p.startMs - expected[i]!.startMs) < 5), `${rate} Hz timings match`);
  }
});

test('chooses the voice from the language and rejects languages espeak cannot speak', async (t) => {
  t.is(await tts.voiceFor({ language: 'fr-CA' }), 'fr');
  t.is(await tts.voiceFor({ language: 'pt-BR' }), 'pt-br');
  t.is(await tts.voiceFor({ language: 'zh' }), 'cmn');
  t.is(await tts.voiceFor({ language: 'sw' }), 'sw', 'codes outside the table are tried as espeak names');
  t.is(await tts.voiceFor({ language: 'fr', voiceId: 'en-us+f3' }), 'en-us+f3', 'an explicit voice wins');
  const french = await synthesize({ text: 'Bonjour, je parle français.', language: 'fr' });
  const english = await synthesize({ text: 'Bonjour, je parle français.', language: 'en' });
  t.true(french.phonemes.some((p) => p.phoneme.includes('ʁ')), 'French voice uses the uvular r');
  t.notDeepEqual(french.phonemes.map((p) => p.phoneme), english.phonemes.map((p) => p.phoneme));
  await t.throwsAsync(synthesize({ text: 'hello', language: 'xx-nope' }), { message: /no voice for language "xx-nope"/ });
  const err = await t.throwsAsync(synthesize({ text: 'hello', voiceId: 'no-such-voice' }));
  t.is((err as { code?: string }).code, 'unknown_voice');
});

test('rejects a bad sample rate and says nothing for empty text', async (t) => {
  const err = await t.throwsAsync(synthesize({ text: 'hello', sampleRate: 1234.5 }));
  t.is((err as { code?: string }).code, 'unsupported_sample_rate');
  const empty = await synthesize({ text: '   ' });
  t.is(empty.events.length, 0);
});

test('an abort stops synthesis mid-sentence and the engine keeps serving', async (t) => {
  const text = 'This is a long sentence that keeps going for quite a while so that we can interrupt it early.';
  const full = await synthesize({ text });
  const controller = new AbortController();
  let received = 0;
  const err = await t.throwsAsync(async () => {
    for await (const event of tts.synthesize({ text, sampleRate: 16000, signal: controller.signal })) {
      if (event.type === 'audio') received += event.pcm.length;
      if (received > 0) controller.abort();
    }
  }, { any: true });
  t.true(isAbortError(err));
  t.true(received < full.pcm.length / 2, `${received} of ${full.pcm.length} samples before the abort`);
  const after = await synthesize({ text: 'Still working.' });
  t.true(after.pcm.length > 0);
  t.deepEqual(after.words.map((w) => w.word), ['Still', 'working.']);
});

test('a request in flight when the engine closes fails clearly, and the engine restarts on demand', async (t) => {
  const engine = new EspeakEngine();
  const own = new LocalTTSService({ engine });
  const err = await t.throwsAsync(async () => {
    for await (const event of own.synthesize({ text: 'A sentence long enough to still be speaking when the engine goes away.', sampleRate: 16000 })) {
      if (event.type === 'audio') await engine.close();
    }
  });
  t.is((err as { code?: string }).code, 'engine_failure');
  const again: number[] = [];
  for await (const event of own.synthesize({ text: 'Back again.', sampleRate: 16000 })) if (event.type === 'audio') again.push(event.pcm.length);
  t.true(again.length > 0);
  await engine.close();
});

test('a pool of workers serves concurrent sessions', async (t) => {
  const engine = new EspeakEngine({ workers: 2 });
  const pooled = new LocalTTSService({ engine });
  const texts = ['First session speaking.', 'Second session speaking at the same time.', 'A third one waits its turn.'];
  const results = await Promise.all(
    texts.map(async (text) => {
      const words: string[] = [];
      let samples = 0;
      for await (const e of pooled.synthesize({ text, sampleRate: 16000 })) {
        if (e.type === 'audio') samples += e.pcm.length;
        if (e.type === 'words') words.push(...e.words.map((w) => w.word));
      }
      return { words: words.join(' '), samples };
    }),
  );
  t.deepEqual(results.map((r) => r.words), texts);
  t.true(results.every((r) => r.samples > 8000));
  await engine.close();
  t.is((t.throws(() => new EspeakEngine({ workers: 0 })) as { code?: string }).code, 'invalid_options');
});
