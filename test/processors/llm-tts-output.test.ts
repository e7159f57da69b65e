import test from 'ava';
import { frame, signal, VirtualClock, type Frame } from '../../core/index.ts';
import { frameTypes, runProcessorTest } from '../../core/testing/index.ts';
import { LLMContext, languagePin } from '../../processors/llm/context.ts';
import { LLMProcessor, LLM_DEFAULTS } from '../../processors/llm/llm-processor.ts';
import type { LLMRequest, LLMService } from '../../processors/services.ts';
import { SentenceAggregator } from '../../processors/tts/sentence-aggregator.ts';
import { TTSProcessor, estimateWordTimings } from '../../processors/tts/tts-processor.ts';
import { OutputTransport } from '../../transports/output-transport.ts';
import { MemoryMediaSink } from '../../transports/media-sink.ts';
import { ScriptedLLM, ToneTTS, speech } from './scripted-services.ts';

const run = () => frame('llm-messages', { messages: [], mode: 'append', run: true });
const texts = (frames: Frame[], type: 'llm-text' | 'tts-text') => frames.flatMap((f) => (f.type === type ? [f.text] : []));

test('LLM: streams text between response start and end, with the system prompt and language pin', async (t) => {
  const clock = new VirtualClock();
  const llm = new ScriptedLLM(clock, ['Bonjour, comment allez-vous ?']);
  const context = new LLMContext({ systemPrompt: 'You are helpful.', language: 'fr' });
  context.addUser('salut');
  const { downstream } = await runProcessorTest(new LLMProcessor(llm, context, { maxTokens: 77 }), [run(), { sleepMs: 1000 }], { clock });
  t.deepEqual(frameTypes(downstream.filter((f) => f.type !== 'llm-text')), ['llm-response-start', 'llm-response-end']);
  t.is(texts(downstream, 'llm-text').join(''), 'Bonjour, comment allez-vous ?');
  const request = llm.requests[0]!;
  t.is(request.maxTokens, 77);
  t.deepEqual(request.messages[0], { role: 'system', content: `You are helpful.\n\n${languagePin('fr')}` });
  t.regex(languagePin('fr'), /Always respond in French/);
  t.deepEqual(request.messages[1], { role: 'user', content: 'salut' });
});

test('LLM: tool-call deltas are accumulated into one complete tool-calls frame', async (t) => {
  const clock = new VirtualClock();
  const llm = new ScriptedLLM(clock, [
    { text: 'Let me check.', toolCalls: [{ id: 'c1', name: 'get_weather', arguments: '{"city":"Paris"}' }, { id: 'c2', name: 'get_time', arguments: '{}' }] },
  ]);
  const context = new LLMContext({ tools: [{ name: 'get_weather', parameters: { type: 'object', properties: {} } }] });
  const { downstream } = await runProcessorTest(new LLMProcessor(llm, context), [run(), { sleepMs: 1000 }], { clock });
  const calls = downstream.find((f) => f.type === 'tool-calls');
  t.deepEqual(calls && calls.type === 'tool-calls' ? calls.calls : undefined, [
    { toolCallId: 'c1', name: 'get_weather', arguments: '{"city":"Paris"}' },
    { toolCallId: 'c2', name: 'get_time', arguments: '{}' },
  ]);
  t.is(llm.requests[0]!.tools?.length, 1);
  t.deepEqual(context.last()?.toolCalls?.map((c) => c.name), ['get_weather', 'get_time']);
});

test('LLM: a tool result coming up from the dispatcher enters the context and can re-run the model', async (t) => {
  const clock = new VirtualClock();
  const llm = new ScriptedLLM(clock, ['It is sunny.']);
  const context = new LLMContext();
  context.addToolCalls([{ toolCallId: 'c1', name: 'get_weather', arguments: '{}' }]);
  const result = frame('tool-call-result', { toolCallId: 'c1', name: 'get_weather', arguments: '{}', result: { sky: 'sunny' }, isError: false, runLlm: true });
  const { downstream } = await runProcessorTest(new LLMProcessor(llm, context), [{ upstream: result }, { sleepMs: 1000 }], { clock });
  t.deepEqual(llm.requests[0]!.messages.at(-1), { role: 'tool', toolCallId: 'c1', content: '{"sky":"sunny"}' });
  t.is(texts(downstream, 'llm-text').join(''), 'It is sunny.');
});

test('LLM: an interruption aborts the provider request', async (t) => {
  const clock = new VirtualClock();
  const llm = new ScriptedLLM(clock, ['one two three four five six seven eight nine ten'], 100, 50);
  const { downstream } = await runProcessorTest(new LLMProcessor(llm, new LLMContext()), [run(), { sleepMs: 200 }, signal('interruption'), { sleepMs: 1000 }], { clock });
  t.is(llm.aborted, 1);
  t.false(frameTypes(downstream).includes('llm-response-end'));
  t.true(texts(downstream, 'llm-text').length < 10);
});

test('LLM: a provider that stalls mid-answer is ended after streamIdleMs as a retryable llm_timeout; the text before it stays and the response is closed', async (t) => {
  const clock = new VirtualClock();
  const llm = new ScriptedLLM(clock, ['first words then nothing for a minute'], 100, 60_000);
  const { downstream, upstream } = await runProcessorTest(new LLMProcessor(llm, new LLMContext(), { streamIdleMs: 1_000 }), [run(), { sleepMs: 1_050 }, { sleepMs: 200 }], { clock });
  const errors = [...upstream, ...downstream].filter((f) => f.type === 'error');
  t.is(errors.length, 1);
  t.like(errors[0], { type: 'error', code: 'llm_timeout', fatal: false });
  t.regex(errors[0]!.type === 'error' ? errors[0]!.message : '', /sent nothing for 1000 ms mid-answer/);
  t.deepEqual(texts(downstream, 'llm-text'), ['first ']);
  t.true(frameTypes(downstream).includes('llm-response-end'), 'the response is closed, so what was said is recorded');
  t.is(llm.aborted, 1, 'the provider request was ended');
});

test('LLM: a provider that never answers and ignores the signal is left after firstEventTimeoutMs (llm_timeout); the next turn is answered', async (t) => {
  const clock = new VirtualClock();
  const requests: LLMRequest[] = [];
  const deaf: LLMService = {
    name: 'deaf-llm',
    model: 'deaf-1',
    async *stream(request) {
      requests.push(request);
      if (requests.length === 1) await new Promise(() => undefined); // neither answers nor reads its signal
      yield { type: 'text', text: 'Back again.' };
      yield { type: 'done', finishReason: 'stop' };
    },
  };
  const { downstream, upstream } = await runProcessorTest(
    new LLMProcessor(deaf, new LLMContext(), { firstEventTimeoutMs: 2_000 }),
    [run(), { sleepMs: 1_900 }, { sleepMs: 200 }, run(), { sleepMs: 100 }],
    { clock },
  );
  const errors = [...upstream, ...downstream].filter((f) => f.type === 'error');
  t.is(errors.length, 1);
  t.like(errors[0], { type: 'error', code: 'llm_timeout', fatal: false });
  t.regex(errors[0]!.type === 'error' ? errors[0]!.message : '', /no answer from deaf-llm within 2000 ms/);
  t.true(requests[0]!.signal!.aborted, 'its request was ended');
  t.deepEqual(texts(downstream, 'llm-text'), ['Back again.'], 'the next turn is answered');
  t.is(frameTypes(downstream).filter((x) => x === 'llm-response-end').length, 2);
});

test('LLM: the default bounds (LLM_DEFAULTS: 60 s to the first event, 30 s between events) let a slow provider finish', async (t) => {
  t.is(LLM_DEFAULTS.firstEventTimeoutMs, 60_000);
  t.is(LLM_DEFAULTS.streamIdleMs, 30_000);
  const clock = new VirtualClock();
  const slow = new ScriptedLLM(clock, ['slow but steady'], 59_000, 29_000);
  const { downstream, upstream } = await runProcessorTest(new LLMProcessor(slow, new LLMContext()), [run(), { sleepMs: 59_000 + 3 * 29_000 + 1_000 }], { clock });
  t.false([...upstream, ...downstream].some((f) => f.type === 'error'));
  t.is(texts(downstream, 'llm-text').join(''), 'slow but steady');
  t.is(slow.aborted, 0);
});

test('sentence aggregation: cuts at sentence ends, keeps decimals and abbreviations, clause-cuts long sentences', (t) => {
  const agg = new SentenceAggregator(60);
  t.deepEqual(agg.push('Hello there. It costs 3.5 dollars'), ['Hello there.']);
  t.deepEqual(agg.push(' today. Dr. Smith agrees! Ok'), ['It costs 3.5 dollars today.', 'Dr. Smith agrees!']);
  t.is(agg.flush(), 'Ok');
  t.deepEqual(agg.push('This sentence goes on and on, with clauses, and more clauses, and still more words '), [
    'This sentence goes on and on, with clauses, and more clauses,',
  ]);
});

test('estimated word timings cover the audio in order', (t) => {
  const words = estimateWordTimings('a bb ccc', 900);
  t.deepEqual(words.map((w) => w.word), ['a', 'bb', 'ccc']);
  t.is(words[0]!.startMs, 0);
  t.is(Math.round(words.at(-1)!.endMs), 900);
  t.true(words.every((w, i) => i === 0 || w.startMs === words[i - 1]!.endMs));
});

test('TTS: speaks the first sentence before the response has ended, with started/stopped around the turn', async (t) => {
  const clock = new VirtualClock();
  const tts = new ToneTTS(clock, 100);
  const steps = [
    frame('llm-response-start', { responseId: 'r' }),
    frame('llm-text', { text: 'Hello there. ' }),
    { sleepMs: 500 },
    frame('llm-text', { text: 'How are you' }),
    frame('llm-response-end', { responseId: 'r' }),
    { sleepMs: 500 },
  ];
  const { downstream } = await runProcessorTest(new TTSProcessor(tts, { sampleRate: 16_000 }), steps, { clock });
  t.deepEqual(tts.requests.map((r) => r.text), ['Hello there.', 'How are you']);
  const types = frameTypes(downstream).filter((x) => x !== 'llm-text');
  t.is(types[1], 'tts-started');
  t.is(types.at(-2), 'tts-stopped');
  const audio = downstream.filter((f) => f.type === 'tts-audio');
  t.true(audio.every((f) => f.type === 'tts-audio' && f.pcm.length === 320), '20 ms chunks at 16 kHz');
  const words = audio.flatMap((f) => (f.type === 'tts-audio' ? (f.words ?? []).map((w) => w.word) : []));
  t.deepEqual(words, ['Hello', 'there.', 'How', 'are', 'you']);
});

test('TTS: tts-speak is said verbatim; an interruption stops synthesis', async (t) => {
  const clock = new VirtualClock();
  const tts = new ToneTTS(clock, 100);
  const { downstream } = await runProcessorTest(
    new TTSProcessor(tts, { sampleRate: 16_000 }),
    [frame('tts-speak', { text: 'Welcome aboard.' }), { sleepMs: 300 }, frame('tts-speak', { text: 'Never said.' }), { sleepMs: 50 }, signal('interruption'), { sleepMs: 300 }],
    { clock },
  );
  t.deepEqual(tts.requests.map((r) => r.text), ['Welcome aboard.', 'Never said.']);
  const words = downstream.flatMap((f) => (f.type === 'tts-audio' ? (f.words ?? []).map((w) => w.word) : []));
  t.deepEqual(words, ['Welcome', 'aboard.']);
});

function ttsAudio(ms: number, words: string[]) {
  const per = ms / words.length;
  return frame('tts-audio', { pcm: speech(ms, 16_000), sampleRate: 16_000, channels: 1, words: words.map((word, i) => ({ word, startMs: i * per, endMs: (i + 1) * per })) });
}

test('output: plays audio in real time, 20 ms per chunk, and reports speaking from what it wrote', async (t) => {
  const clock = new VirtualClock();
  const sink = new MemoryMediaSink();
  const output = new OutputTransport(sink, { sampleRate: 16_000 });
  const { downstream, upstream } = await runProcessorTest(
    output,
    [frame('tts-started', {}), ttsAudio(200, ['one', 'two']), frame('tts-stopped', {}), { sleepMs: 500 }],
    { clock, ignore: ['start', 'end', 'tts-audio'] },
  );
  t.is(sink.audio.length, 10);
  t.deepEqual(sink.audio.map((a) => a.ptsMs), [0, 20, 40, 60, 80, 100, 120, 140, 160, 180]);
  t.deepEqual(frameTypes(downstream), ['tts-started', 'bot-started-speaking', 'tts-text', 'tts-text', 'tts-stopped', 'bot-stopped-speaking']);
  t.deepEqual(texts(downstream, 'tts-text'), ['one', 'two']);
  t.deepEqual(frameTypes(upstream), ['bot-started-speaking', 'bot-stopped-speaking']);
});

test('output: an interruption stops playback within one chunk and only played words are reported', async (t) => {
  const clock = new VirtualClock();
  const sink = new MemoryMediaSink();
  const output = new OutputTransport(sink, { sampleRate: 16_000 });
  const { downstream } = await runProcessorTest(
    output,
    [ttsAudio(1000, ['a', 'b', 'c', 'd', 'e']), { sleepMs: 450 }, signal('interruption'), { sleepMs: 1000 }],
    { clock, ignore: ['start', 'end', 'tts-audio'] },
  );
  // At 450 ms the chunk due at 440 ms had just been written; nothing after it.
  t.is(sink.audio.length, 23);
  t.is(sink.clears, 1);
  t.deepEqual(texts(downstream, 'tts-text'), ['a', 'b', 'c']);
  t.deepEqual(frameTypes(downstream).slice(-2), ['interruption', 'bot-stopped-speaking']);
});

test('TTS: a word timing that arrives after its audio rides on the next chunk instead of being lost', async (t) => {
  const clock = new VirtualClock();
  const late: import('../../processors/services.ts').TTSService = {
    name: 'late-words',
    async *synthesize(request) {
      yield { type: 'words', words: [{ word: 'early', startMs: 0, endMs: 100 }] };
      yield { type: 'audio', pcm: speech(200, request.sampleRate), sampleRate: request.sampleRate };
      yield { type: 'words', words: [{ word: 'late', startMs: 100, endMs: 200 }] };
      yield { type: 'audio', pcm: speech(200, request.sampleRate), sampleRate: request.sampleRate };
    },
  };
  const { downstream } = await runProcessorTest(new TTSProcessor(late, { sampleRate: 16_000 }), [frame('tts-speak', { text: 'early late' }), { sleepMs: 100 }], { clock });
  const words = downstream.flatMap((f) => (f.type === 'tts-audio' ? (f.words ?? []).map((w) => w.word) : []));
  t.deepEqual(words, ['early', 'late']);
});

test('TTS: a provider that goes silent mid-piece ends that piece as a retryable tts_timeout after streamIdleMs; the next piece is spoken', async (t) => {
  const clock = new VirtualClock();
  const stalled = new ToneTTS(clock, 60_000); // its first audio would come after a minute: a stream left hanging
  const steps = [frame('tts-speak', { text: 'This never comes.' }), { sleepMs: 1_500 }];
  const { downstream, upstream } = await runProcessorTest(new TTSProcessor(stalled, { sampleRate: 16_000, streamIdleMs: 1_000 }), steps, { clock });
  const errors = [...upstream, ...downstream].filter((f) => f.type === 'error');
  t.is(errors.length, 1);
  t.like(errors[0], { type: 'error', code: 'tts_timeout', fatal: false });
  t.regex(errors[0]!.type === 'error' ? errors[0]!.message : '', /no audio from tone-tts for 1000 ms/);
  t.true(stalled.requests[0]!.signal!.aborted, 'the provider request was ended');

  const next = new ToneTTS(clock, 100);
  const ok = await runProcessorTest(new TTSProcessor(next, { sampleRate: 16_000, streamIdleMs: 1_000 }), [frame('tts-speak', { text: 'Welcome aboard.' }), { sleepMs: 500 }], { clock });
  t.false([...ok.upstream, ...ok.downstream].some((f) => f.type === 'error'), 'a provider that answers within the bound is not cut');
});
