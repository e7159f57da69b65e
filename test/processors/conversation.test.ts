import test from 'ava';
import { concat, frame, silence, VirtualClock } from '../../core/index.ts';
import { Conversation } from '../../testing/index.ts';
import { MemoryMediaSink } from '../../transports/media-sink.ts';
import { createVoicePipeline, type VoicePipelineOptions } from '../../agent/voice-pipeline.ts';
import type { BehaviourOptions } from '../../processors/behaviours/conversation-behaviours.ts';
import { EnergyVAD, ScriptedLLM, ScriptedSTT, ToneTTS, speech, type ScriptedResponse } from './scripted-services.ts';

/** A voice pipeline of scripted services, in the conversation harness of the testing entry point. */
async function conversation(
  phrases: string[],
  responses: ScriptedResponse[],
  extra: Partial<VoicePipelineOptions> & { behaviours?: BehaviourOptions; ttsFirstAudioMs?: number; allowInterruptions?: boolean } = {},
) {
  const clock = new VirtualClock();
  const sink = new MemoryMediaSink();
  const llm = new ScriptedLLM(clock, responses, 300, 20);
  const tts = new ToneTTS(clock, extra.ttsFirstAudioMs ?? 100);
  const voice = createVoicePipeline({
    vad: new EnergyVAD(),
    stt: new ScriptedSTT(clock, phrases, 150),
    llm,
    tts,
    sink,
    language: 'en',
    systemPrompt: 'Be brief.',
    vadOptions: { startMs: 100, stopMs: 400 },
    ...extra,
  });
  const c = await Conversation.start({ pipeline: voice.processors, clock, worker: { allowInterruptions: extra.allowInterruptions ?? true } });
  return { clock, worker: c.worker, sink, llm, tts, voice, outcome: () => c.outcome, say: (pcm: Int16Array) => c.say(pcm) };
}
type Harness = Awaited<ReturnType<typeof conversation>>;

const utterance = (ms: number) => concat([speech(ms), silence(600, 16_000)]);
const contextOf = (h: Harness) => h.voice.context.messages().map((m) => `${m.role}:${m.content ?? ''}`);

test('a full turn: speech in -> VAD -> STT -> LLM -> TTS -> output, and the context records both sides', async (t) => {
  const h = await conversation(['what time is it'], ['It is noon. Anything else?']);
  await h.say(utterance(800));
  await h.clock.advance(3000);
  t.true(h.sink.audioMs > 0, 'the bot answered with audio');
  t.deepEqual(contextOf(h).slice(1), ['user:what time is it', 'assistant:It is noon. Anything else?']);
  t.is(h.tts.requests.length, 2, 'one request per sentence');
  t.deepEqual(h.sink.messages, [
    { type: 'transcript-turn', owner: 'user', text: 'what time is it' },
    { type: 'transcript-turn', owner: 'bot', text: 'It is noon. Anything else?' },
  ]);
  await h.worker.cancel();
});

test('barge-in mid-answer (false interruptions off: any sound cuts): playback stops within one chunk and the context keeps only the words played', async (t) => {
  const long = 'one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen.';
  const h = await conversation(['tell me a story', 'stop'], [long, 'Okay.'], { turnOptions: { resumeFalseInterruptions: false } });
  await h.say(utterance(600));
  // Let the bot speak for a while: 16 words x 60 ms = 960 ms of audio.
  await h.clock.advanceUntil(() => h.voice.output.botSpeaking, 5000);
  await h.clock.advance(400);
  const writtenBefore = h.sink.audio.length;
  await h.say(speech(140)); // the user talks over the bot; the VAD needs 100 ms to decide
  const stoppedAt = h.sink.audio.length;
  t.false(h.voice.output.botSpeaking);
  t.true(stoppedAt - writtenBefore <= 8, `${stoppedAt - writtenBefore} chunks written while the user spoke (7 before the VAD decided)`);
  await h.clock.advance(40);
  t.true(h.sink.audio.length - stoppedAt <= 1, 'at most one more chunk after the interruption');
  const assistant = h.voice.context.messages().find((m) => m.role === 'assistant')!.content!;
  t.true(long.startsWith(assistant), `"${assistant}" is a prefix of the answer`);
  t.true(assistant.split(' ').length < 16, 'unplayed words are not in the context');
  t.true(assistant.split(' ').length >= 5);
  await h.worker.cancel();
});

test('with interruption off, speech over the bot is neither cut nor lost: it is answered after', async (t) => {
  const h = await conversation(['first question', 'second question'], ['one two three four five six seven eight nine ten.', 'Second answer.'], {
    allowInterruptions: false,
  });
  await h.say(utterance(600));
  await h.clock.advanceUntil(() => h.voice.output.botSpeaking, 5000);
  await h.say(utterance(400));
  await h.clock.advance(4000);
  t.deepEqual(contextOf(h).slice(1), [
    'user:first question',
    'assistant:one two three four five six seven eight nine ten.',
    'user:second question',
    'assistant:Second answer.',
  ]);
  await h.worker.cancel();
});

test('greeting: a verbatim greeting is spoken first when the agent starts the conversation', async (t) => {
  const h = await conversation([], [], { behaviours: { startsConversation: true, greeting: { text: 'Hello, I am Ada.', mode: 'verbatim' } } });
  await h.clock.advance(2000);
  t.deepEqual(h.tts.requests.map((r) => r.text), ['Hello, I am Ada.']);
  t.deepEqual(contextOf(h).slice(1), ['assistant:Hello, I am Ada.']);
  await h.worker.cancel();
});

test('greeting: a generated greeting asks the model, guided by the text and reference', async (t) => {
  const h = await conversation([], ['Hi there, welcome!'], {
    behaviours: { startsConversation: true, greeting: { text: 'Welcome to Acme', reference: 'mention the sale', mode: 'generated' } },
  });
  await h.clock.advance(2000);
  const system = h.llm.requests[0]!.messages.filter((m) => m.role === 'system').map((m) => m.content).join('\n');
  t.regex(system, /\[greeting\].*Welcome to Acme.*mention the sale/);
  t.deepEqual(h.tts.requests.map((r) => r.text), ['Hi there, welcome!']);
  await h.worker.cancel();
});

test('nudge: after the inactivity delay the user is nudged once, and speech re-arms it', async (t) => {
  const h = await conversation(['yes I am here'], ['Great.'], {
    behaviours: { inactivityNudgeMs: 5000, nudge: { text: 'Are you still there?', mode: 'verbatim' } },
  });
  await h.clock.advance(4900);
  t.is(h.tts.requests.length, 0);
  await h.clock.advance(200);
  t.deepEqual(h.tts.requests.map((r) => r.text), ['Are you still there?']);
  await h.clock.advance(20_000);
  t.is(h.tts.requests.length, 1, 'one nudge per silence');
  await h.say(utterance(500));
  await h.clock.advance(8000);
  t.deepEqual(h.tts.requests.map((r) => r.text), ['Are you still there?', 'Great.', 'Are you still there?']);
  await h.worker.cancel();
});

test('max duration: the farewell is spoken and the conversation ends', async (t) => {
  const h = await conversation([], [], {
    behaviours: { maxConversationMs: 3000, farewell: { text: 'Time is up, goodbye!', mode: 'verbatim' } },
  });
  await h.clock.advance(2900);
  t.is(h.outcome(), undefined);
  await h.clock.advanceUntil(() => h.outcome() !== undefined, 5000);
  t.deepEqual(h.outcome(), { how: 'ended', reason: 'max_duration' });
  t.deepEqual(h.tts.requests.map((r) => r.text), ['Time is up, goodbye!']);
  t.true(h.sink.audioMs >= 4 * 60, 'the whole farewell was played before the end');
});

test('an end requested from below (e.g. the end_call tool) says the farewell first', async (t) => {
  const h = await conversation([], [], { behaviours: { farewell: { text: 'Bye now.', mode: 'verbatim' } } });
  h.voice.llm.push(frame('end', { reason: 'end_call' }), 'upstream');
  await h.clock.advanceUntil(() => h.outcome() !== undefined, 5000);
  t.deepEqual(h.outcome(), { how: 'ended', reason: 'end_call' });
  t.deepEqual(h.tts.requests.map((r) => r.text), ['Bye now.']);
  t.true(h.sink.audioMs >= 2 * 60);
});

test('a non-English agent pins the response language and tells STT and TTS', async (t) => {
  const h = await conversation(['bonjour'], ['Bonjour !'], { language: 'fr' });
  await h.say(utterance(500));
  await h.clock.advance(3000);
  t.regex(h.llm.requests[0]!.messages[0]!.content!, /Always respond in French/);
  t.is(h.tts.requests[0]!.language, 'fr');
  await h.worker.cancel();
});

test('a pause mid-answer (slow TTS, playback ran dry) does not split the answer in the context', async (t) => {
  const h = await conversation(['tell me two things'], ['First thing. Second thing.'], { ttsFirstAudioMs: 600 });
  await h.say(utterance(500));
  await h.clock.advance(4000);
  const botStops = h.sink.audio.length; // sanity: both sentences were played
  t.true(botStops >= 12);
  t.deepEqual(contextOf(h).slice(1), ['user:tell me two things', 'assistant:First thing. Second thing.']);
  t.deepEqual(h.sink.messages.filter((m) => m.owner === 'bot'), [{ type: 'transcript-turn', owner: 'bot', text: 'First thing. Second thing.' }]);
  await h.worker.cancel();
});
