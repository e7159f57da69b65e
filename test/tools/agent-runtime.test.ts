/**
 * Tools through the agent runtime (agent/agent-pipeline.ts): an Agent record's
 * `tools` and `mode` go in, a real pipeline comes out. Checks that the record's tools reach the
 * model and the dispatcher as the spec says, that webhook calls carry the session metadata, and
 * that `end_call` ends the session gracefully after the farewell. Providers are the scripted
 * stand-ins on the virtual clock; webhooks are real local HTTP servers.
 */
import test from 'ava';
import { concat, Registry, silence, VirtualClock } from '../../core/index.ts';
import type { AgentTool } from '../../processors/tools/agent-tool.ts';
import { WebhookClient } from '../../processors/tools/webhook-client.ts';
import { buildAgentPipeline, type AgentRuntimeRecord } from '../../agent/agent-pipeline.ts';
import { AGENT_DEFAULTS } from '../../server/services/agent-defaults.ts';
import { Conversation } from '../../testing/index.ts';
import { MemoryMediaSink } from '../../transports/media-sink.ts';
import { EnergyVAD, ScriptedLLM, ScriptedSTT, ToneTTS, speech, type ScriptedResponse } from '../processors/scripted-services.ts';
import { captureLogger } from './dispatcher-driver.ts';
import { json, startLocalWebhook } from './local-webhook.ts';

const AGENT_ID = '7b0c0a8e-1111-4c4c-8888-0000000000aa';
const SESSION = { session_id: 'sess-runtime', call_id: '5d7e1c2a-2222-4c4c-8888-0000000000bb', client_user_ref: 'user-9' };

function record(tools: readonly AgentTool[], overrides: Partial<AgentRuntimeRecord> = {}): AgentRuntimeRecord {
  return {
    ...AGENT_DEFAULTS,
    agent_id: AGENT_ID,
    tts_provider: 'tone',
    starts_conversation: false,
    tools,
    ...overrides,
    behaviour: { ...AGENT_DEFAULTS.behaviour, ...overrides.behaviour },
    advanced: { ...AGENT_DEFAULTS.advanced },
  } as AgentRuntimeRecord;
}

async function session(agent: AgentRuntimeRecord, phrases: string[], responses: ScriptedResponse[]) {
  const clock = new VirtualClock();
  const llm = new ScriptedLLM(clock, responses, 200, 10);
  const tts = new ToneTTS(clock, 50);
  const registry = new Registry();
  registry.register('stt', 'scripted', () => new ScriptedSTT(clock, phrases, 100));
  registry.register('llm', 'scripted', () => llm);
  registry.register('tts', 'tone', () => tts);
  registry.register('vad', 'energy', () => new EnergyVAD());
  const sink = new MemoryMediaSink();
  const logger = captureLogger();
  const built = await buildAgentPipeline(agent, {
    registry,
    sink,
    providers: { stt: 'scripted', llm: 'scripted', vad: 'energy' },
    session: SESSION,
    webhooks: new WebhookClient({ allowedRanges: ['127.0.0.1/32'] }),
    logger,
    // The scripted model answers in order: a preemptive run (processors/turns) would take an answer.
    tuning: { vadOptions: { startMs: 100, stopMs: 300 }, turnOptions: { preemptiveGeneration: false } },
  });
  // Virtual time for the pipeline; a real millisecond after every 10 ms step lets the local webhook server answer.
  const c = await Conversation.start({ pipeline: built.pipeline, clock, stepMs: 10, realPauseMs: 1 });
  const say = (ms: number) => c.say(concat([speech(ms), silence(500, 16_000)]));
  return { clock, llm, tts, sink, logger, built, worker: c.worker, conversation: c, say, outcome: () => c.outcome };
}

const webhook = (name: string, url: string): AgentTool => ({
  enabled: true,
  type: 'function',
  function: { name, description: `${name} on our server`, parameters: { type: 'object', properties: { order: { type: 'string' } }, required: ['order'], additionalProperties: false } },
  delivery: { mode: 'webhook', url, wait_for_response: true },
});
const client = (name: string, enabled = true): AgentTool => ({ enabled, type: 'function', function: { name, description: name }, delivery: { mode: 'client' } });

test('the runtime feeds an Agent record\'s tools to the model and the dispatcher; a webhook call carries the session metadata', async (t) => {
  const server = await startLocalWebhook((_r, res) => json(res, 200, { result: 'shipped on Monday' }));
  t.teardown(() => server.close());
  const tools = [webhook('order_status', server.url()), client('open_page'), client('hidden_tool', false), webhook('internal', 'http://10.0.0.1/hook')];
  const s = await session(record(tools), ['where is my order'], [
    { toolCalls: [{ id: 'c1', name: 'order_status', arguments: '{"order":"A-17"}' }] },
    'Your order shipped on Monday.',
  ]);
  t.deepEqual(s.built.toolset.dropped.map((d) => [d.name, d.code]), [['internal', 'webhook_refused']]);
  t.true(s.logger.entries.some((e) => e.level === 'warn' && e.fields['tool'] === 'internal' && /10\.0\.0\.1/.test(String(e.fields['reason']))), 'the drop is logged with its reason');

  await s.say(600);
  await s.conversation.expect(() => s.tts.requests.length === 1, 20_000, 'the spoken answer');
  t.deepEqual(s.llm.requests[0]!.tools?.map((d) => d.name), ['order_status', 'open_page', 'end_call']);
  t.deepEqual(JSON.parse(server.received[0]!.body), {
    tool_call_message: { name: 'order_status', parameters: '{"order":"A-17"}', tool_call_id: 'c1', response_required: true, tool_type: 'function' },
    session_id: SESSION.session_id,
    agent_id: AGENT_ID,
    call_id: SESSION.call_id,
    client_user_ref: 'user-9',
  });
  t.deepEqual(s.llm.requests[1]!.messages.at(-1), { role: 'tool', toolCallId: 'c1', content: 'shipped on Monday' });
  t.is(s.tts.requests[0]!.text, 'Your order shipped on Monday.');
  await s.worker.cancel();
});

test('the runtime ends the session gracefully on end_call, after the goodbye and the configured farewell', async (t) => {
  const s = await session(record([client('open_page')], { behaviour: { farewell_message: 'Thanks for calling Acme.', farewell_mode: 'verbatim' } }), ['that is all, bye'], [
    { text: 'Goodbye!', toolCalls: [{ id: 'c1', name: 'end_call', arguments: '{}' }] },
  ]);
  await s.say(600);
  await s.conversation.expect(() => s.outcome() !== undefined, 20_000, 'the session to end');
  t.deepEqual(s.outcome(), { how: 'ended', reason: 'end_call' });
  t.deepEqual(s.tts.requests.map((r) => r.text), ['Goodbye!', 'Thanks for calling Acme.']);
  t.true(s.sink.audioMs >= 4 * ToneTTS.MS_PER_WORD, `${s.sink.audioMs} ms played: both lines in full`);
});

test('a third_party agent run by the runtime never dispatches, even if its model calls a tool', async (t) => {
  const server = await startLocalWebhook((_r, res) => json(res, 200, { result: 'must not be called' }));
  t.teardown(() => server.close());
  const s = await session(record([webhook('order_status', server.url()), client('open_page')], { mode: 'third_party' }), ['hello'], [
    { toolCalls: [{ id: 'c1', name: 'order_status', arguments: '{"order":"A"}' }, { id: 'c2', name: 'open_page', arguments: '{}' }] },
  ]);
  await s.say(600);
  await s.conversation.expect(() => s.llm.requests.length === 1, 20_000, 'the model run');
  await s.clock.advance(3_000);
  await new Promise((resolve) => setTimeout(resolve, 50));
  t.is(s.llm.requests[0]!.tools, undefined, 'no tools offered');
  t.is(server.received.length, 0);
  t.false(s.sink.messages.some((m) => m['type'] === 'tool-call'));
  await s.worker.cancel();
});
