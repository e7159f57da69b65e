/**
 * Tools inside the standard voice pipeline (VAD -> STT -> user turns -> behaviours -> LLM ->
 * ToolDispatcher -> TTS -> output -> assistant turns) on the virtual clock: the dispatcher learns
 * about speech only from the frames the real output transport emits.
 */
import test from 'ava';
import { concat, silence, VirtualClock } from '../../core/index.ts';
import type { BehaviourOptions } from '../../processors/behaviours/conversation-behaviours.ts';
import { ToolDispatcher } from '../../processors/tools/tool-dispatcher.ts';
import { prepareToolset } from '../../processors/tools/toolset.ts';
import { WebhookClient } from '../../processors/tools/webhook-client.ts';
import { createVoicePipeline } from '../../agent/voice-pipeline.ts';
import { Conversation } from '../../testing/index.ts';
import { MemoryMediaSink } from '../../transports/media-sink.ts';
import { EnergyVAD, ScriptedLLM, ScriptedSTT, ToneTTS, speech, type ScriptedResponse } from '../processors/scripted-services.ts';
import { captureLogger } from './dispatcher-driver.ts';
import { clientTool, SESSION } from './tool-session.ts';

async function conversation(phrases: string[], responses: ScriptedResponse[], behaviours: BehaviourOptions = {}) {
  const clock = new VirtualClock();
  const sink = new MemoryMediaSink();
  const llm = new ScriptedLLM(clock, responses, 300, 20);
  const tts = new ToneTTS(clock, 100);
  const logger = captureLogger();
  const webhooks = new WebhookClient();
  const toolset = await prepareToolset([clientTool('open_page')], { mode: 'svc', webhooks, logger });
  const voice = createVoicePipeline({
    vad: new EnergyVAD(),
    stt: new ScriptedSTT(clock, phrases, 150),
    llm,
    tts,
    sink,
    language: 'en',
    vadOptions: { startMs: 100, stopMs: 400 },
    // The scripted model answers in order: a preemptive run (processors/turns) would take an answer.
    turnOptions: { preemptiveGeneration: false },
    behaviours,
    tools: toolset.definitions,
    afterLLM: new ToolDispatcher({ toolset, webhooks, session: SESSION, logger }),
  });
  const c = await Conversation.start({ pipeline: voice.processors, clock });
  /** Client messages that crossed the whole pipeline, out of its last processor. */
  const clientMessages = () =>
    c.pushes('client-message').filter((e) => e.destination === 'WorkerSink').map((e) => (e.frame as { message: unknown }).message);
  return { c, sink, llm, tts, voice, clientMessages };
}

const utterance = (ms: number) => concat([speech(ms), silence(600, 16_000)]);
const endCall = { id: 'c1', name: 'end_call', arguments: '{}' };

test('end_call in a conversation: the goodbye and the configured farewell are played, then the session ends', async (t) => {
  const h = await conversation(['bye'], [{ text: 'Goodbye, take care!', toolCalls: [endCall] }], {
    farewell: { text: 'See you soon.', mode: 'verbatim' },
  });
  await h.c.say(utterance(600));
  t.true(await h.c.settle(() => h.c.outcome !== undefined, 20_000), 'the session ended');
  t.deepEqual(h.c.outcome, { how: 'ended', reason: 'end_call' });
  t.deepEqual(h.llm.requests[0]!.tools?.map((d) => d.name), ['open_page', 'end_call']);
  t.deepEqual(h.tts.requests.map((r) => r.text), ['Goodbye, take care!', 'See you soon.']);
  t.true(h.sink.audioMs >= 6 * ToneTTS.MS_PER_WORD, `${h.sink.audioMs} ms played: every word of both lines`);
});

test('end_call in a conversation: the user barging into the goodbye keeps the call open', async (t) => {
  const long = 'Goodbye then, it was a real pleasure talking with you today, take care of yourself.';
  const h = await conversation(['bye', 'wait one more thing'], [{ text: long, toolCalls: [endCall] }, 'Sure, what is it?']);
  await h.c.say(utterance(600));
  await h.c.settle(() => h.voice.output.botSpeaking, 5_000);
  await h.c.advance(300);
  await h.c.say(utterance(400));
  await h.c.advance(10_000);
  t.is(h.c.outcome, undefined, 'still connected');
  const said = h.voice.context.messages().filter((m) => m.role === 'assistant').map((m) => m.content);
  t.true(said.includes('Sure, what is it?'), `the agent answered the user: ${JSON.stringify(said)}`);
  await h.c.cancel();
});

test('a client tool in a conversation: the message reaches the client and the model speaks after the acknowledgement', async (t) => {
  const h = await conversation(
    ['show me the prices'],
    [{ toolCalls: [{ id: 'c7', name: 'open_page', arguments: '{"q":"pricing"}' }] }, 'Here is our pricing page.'],
  );
  await h.c.say(utterance(600));
  await h.c.advance(5_000);
  t.deepEqual(
    h.clientMessages().filter((m) => (m as { type: string }).type === 'tool-call'),
    [{ type: 'tool-call', function_name: 'open_page', tool_call_id: 'c7', arguments: { q: 'pricing' } }],
  );
  t.is(h.llm.requests.length, 2, 'the model ran again after the acknowledgement');
  t.deepEqual(h.llm.requests[1]!.messages.at(-1), {
    role: 'tool',
    toolCallId: 'c7',
    content: 'The request was sent. No result will be returned for this call.',
  });
  t.deepEqual(h.tts.requests.map((r) => r.text), ['Here is our pricing page.']);
  await h.c.cancel();
});
