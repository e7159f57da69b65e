import test from 'ava';
import { chunkAudio, concat, silence } from '../../core/audio.ts';
import type { LLMEvent, STTStreamOptions, TranscriptEvent } from '../../processors/services.ts';
import { LocalPhraseSTT, LocalResponder, LocalTTSService, UNRECOGNISED_SPEECH, type LocalSTTOptions } from '../../plugins/local/index.ts';
import type { LocalEngineError } from '../../plugins/local/local-engine-error.ts';
import { wordsAfter } from '../../plugins/local/local-stt.ts';
import { phraseBeginnings } from '../../plugins/local/phrase-recogniser.ts';

const tts = new LocalTTSService();

async function say(text: string, sampleRate: number, language = 'en', gain = 1): Promise<Int16Array> {
  const parts: Int16Array[] = [];
  for await (const e of tts.synthesize({ text, sampleRate, language })) if (e.type === 'audio') parts.push(e.pcm);
  return concat(parts).map((v) => Math.round(v * gain));
}

/**
 * Plays utterances into a stream in 20 ms chunks, as an input transport would, each followed by
 * `finalize()` (what the pipeline does on user-stopped-speaking) unless `finalize` is false.
 */
async function transcribe(
  utterances: Int16Array[],
  options: Partial<STTStreamOptions> & { finalize?: boolean; stt?: LocalSTTOptions } = {},
): Promise<TranscriptEvent[]> {
  const sampleRate = options.sampleRate ?? 16000;
  const stt = new LocalPhraseSTT(options.stt);
  const stream = await stt.connect({ language: 'en', channels: 1, interimResults: true, ...options, sampleRate });
  const events: TranscriptEvent[] = [];
  let completed = false;
  stream.transcripts.subscribe({ next: (e) => events.push(e), complete: () => (completed = true) });
  for (const pcm of utterances) {
    for (const chunk of chunkAudio(concat([silence(300, sampleRate), pcm, silence(300, sampleRate)]), sampleRate, 20)) stream.sendAudio(chunk);
    if (options.finalize !== false) stream.finalize();
  }
  await stream.close();
  if (!completed) throw new Error('transcripts did not complete on close');
  return events;
}

test('transcribes the phrases the offline TTS speaks, at the pipeline rate', async (t) => {
  const phrases = ['What can you do?', 'Tell me a joke', 'Goodbye'];
  const events = await transcribe(await Promise.all(phrases.map((p) => say(p, 24000))), { sampleRate: 24000 });
  t.deepEqual(events.map((e) => e.text), phrases);
  for (const e of events) {
    t.true(e.final && e.endOfUtterance === true);
    t.is(e.language, 'en');
    t.true((e.confidence ?? 0) > 0.6, `confidence ${e.confidence}`);
    t.true(e.startMs! < e.endMs!);
  }
  t.true(events[0]!.endMs! <= events[1]!.startMs!, 'utterance times follow the audio');
});

test('still recognises a quiet copy at 48 kHz', async (t) => {
  const events = await transcribe([await say('How are you?', 48000, 'en', 0.2)], { sampleRate: 48000 });
  t.deepEqual(events.map((e) => e.text), ['How are you?']);
});

test('transcribes speech that matches no phrase as unrecognised, or drops it when asked', async (t) => {
  const other = await say('The quick brown fox jumps over the lazy dog', 16000);
  const events = await transcribe([other]);
  t.deepEqual(events.map((e) => [e.text, e.confidence]), [[UNRECOGNISED_SPEECH, 0]]);
  t.deepEqual(await transcribe([other], { stt: { unrecognised: 'ignore' } }), []);
});

test('silence, a click and finalize without speech produce nothing', async (t) => {
  const click = new Int16Array(80).fill(20000);
  t.deepEqual(await transcribe([silence(500, 16000), click]), []);
});

test('ends an utterance by itself after a long silence', async (t) => {
  const pcm = concat([await say('Thank you', 16000), silence(1200, 16000), await say('Hello', 16000)]);
  const events = await transcribe([pcm], { finalize: false });
  t.deepEqual(events.map((e) => e.text), ['Thank you', 'Hello'], 'the second is flushed by close()');
});

test('recognises a custom phrase list in French', async (t) => {
  const stt = { phrases: ['Bonjour', 'Quelle heure est-il ?', 'Au revoir'] };
  const audio = [await say('Quelle heure est-il ?', 16000, 'fr'), await say('Au revoir', 16000, 'fr')];
  const events = await transcribe(audio, { language: 'fr', stt });
  t.deepEqual(events.map((e) => [e.text, e.language]), [['Quelle heure est-il ?', 'fr'], ['Au revoir', 'fr']]);
});

test('rejects stereo, odd rates and languages without a voice at connect', async (t) => {
  const stt = new LocalPhraseSTT({ phrases: ['hello'] });
  const base = { language: 'en', sampleRate: 16000, channels: 1, interimResults: false };
  const code = async (options: STTStreamOptions) => ((await t.throwsAsync(stt.connect(options))) as LocalEngineError).code;
  t.is(await code({ ...base, channels: 2 }), 'invalid_options');
  t.is(await code({ ...base, sampleRate: 100 }), 'unsupported_sample_rate');
  t.is(await code({ ...base, language: 'xx' }), 'unsupported_language');
  t.throws(() => new LocalPhraseSTT({ phrases: [''] }), { message: /non-empty/ });
});

test('offline round trip: TTS speech -> STT stand-in -> responder', async (t) => {
  const [heard] = await transcribe([await say('What is your name?', 16000)]);
  t.is(heard!.text, 'What is your name?');
  const answer: LLMEvent[] = [];
  for await (const e of new LocalResponder().stream({ messages: [{ role: 'system', content: 'You are Ada.' }, { role: 'user', content: heard!.text }] })) answer.push(e);
  t.regex(answer.map((e) => (e.type === 'text' ? e.text : '')).join(''), /^I am Ada, an offline stand-in/);
});

test('the beginning of a phrase is its words and an ellipsis; the rest after a pause is recognised joined to it', async (t) => {
  const [whatCanYou, doIt, tellMeA, joke, hello] = await Promise.all(['What can you', 'do?', 'Tell me a', 'joke', 'Hello'].map((p) => say(p, 16000)));
  // Matched against the whole phrases only, "What can you" was "What can you do?" (a cut-off: the
  // turn closed on its question mark).
  t.deepEqual((await transcribe([whatCanYou!, doIt!])).map((e) => e.text), ['What can you…', 'do?']);
  t.deepEqual((await transcribe([tellMeA!, joke!])).map((e) => e.text), ['Tell me a…', 'joke']);
  // Something else after a beginning is recognised on its own.
  t.deepEqual((await transcribe([whatCanYou!, hello!])).map((e) => e.text), ['What can you…', 'Hello']);
  // The rest comes too late (the utterances are 600 ms apart here): on its own, "do?" is no phrase.
  t.deepEqual((await transcribe([whatCanYou!, doIt!], { stt: { prefixHoldMs: 100 } })).map((e) => e.text), ['What can you…', UNRECOGNISED_SPEECH]);
  // Whole phrases stay whole.
  t.deepEqual((await transcribe([await say('What can you do?', 16000), await say('Tell me a joke', 16000)])).map((e) => e.text), ['What can you do?', 'Tell me a joke']);
});

test('wordsAfter: the words of a phrase after its beginning, punctuation kept', (t) => {
  t.is(wordsAfter('What can you do?', 'What can you'), 'do?');
  t.is(wordsAfter('What is your name?', 'what is'), 'your name?');
  t.is(wordsAfter('¿Qué puedes hacer?', 'Qué puedes'), 'hacer?');
  t.is(wordsAfter('What can you do?', 'What can you do'), undefined, 'nothing after');
  t.is(wordsAfter('Tell me a joke', 'What can'), undefined, 'another beginning');
  t.deepEqual(phraseBeginnings('What is your name?'), ['What is', 'What is your']);
  t.deepEqual(phraseBeginnings('Hang up'), []);
  t.deepEqual(phraseBeginnings('Comment allez-vous ?'), []);
});
