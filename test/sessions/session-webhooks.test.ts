/**
 * The operator's webhook allow-list reaches the tool webhooks of live sessions (issue 17 item 11):
 * `SVC_WEBHOOK_ALLOWED_RANGES` (config `webhookAllowedRanges`) opens a private range, and a real
 * session's tool call then reaches a webhook on loopback; a server without it drops the tool.
 * The visitor speaks the offline responder's tool phrase into its microphone.
 */
import test from 'ava';
import { concat, silence } from '../../core/audio.ts';
import { LocalTTSService } from '../../plugins/local/index.ts';
import { RoomVisitor } from '../agent/room-visitor.ts';
import { holdsWithin, until } from '../../testing/until.ts';
import { json, startLocalWebhook, type LocalWebhook } from '../tools/local-webhook.ts';
import { roomOf, startSessionServer, type SessionTestServer } from './session-harness.ts';

const PHRASE = 'Call tool get weather with city Paris';
const voice = new LocalTTSService();
const providers = { stt: 'local', llm: 'local', vad: 'local', options: { 'stt:local': { phrases: [PHRASE, 'Hello'] } } };
let hook: LocalWebhook;
const servers: SessionTestServer[] = [];

test.before(async () => {
  hook = await startLocalWebhook((_req, res) => json(res, 200, { result: { forecast: 'sunny' } }));
  await voice.warmUp();
});
test.after.always(async () => {
  for (const s of servers) await s.stop();
  await hook?.close();
});

async function talk(s: SessionTestServer): Promise<{ visitor: RoomVisitor; room: string }> {
  const agentId = await s.agent({
    behaviour: { greeting: 'Hi.' },
    tools: [{ type: 'function', enabled: true, function: { name: 'get_weather', description: 'Weather for a city', parameters: { properties: { city: { type: 'string' } }, required: ['city'] } }, delivery: { mode: 'webhook', url: hook.url('/weather'), wait_for_response: true } }],
  });
  const res = await s.connect({ agent_id: agentId });
  if (res.status !== 200) throw new Error(res.text);
  const visitor = await RoomVisitor.join(res.body.room_url, res.body.token);
  visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
  await holdsWithin(() => visitor.ofType('transcript-turn').some((m) => m.owner === 'bot'), { timeoutMs: 30_000, intervalMs: 20 });
  const parts: Int16Array[] = [];
  for await (const e of voice.synthesize({ text: PHRASE, language: 'en', sampleRate: 16_000 })) if (e.type === 'audio') parts.push(e.pcm);
  visitor.say(concat([...parts, silence(300, 16_000)]));
  await holdsWithin(() => visitor.ofType('transcript-turn').filter((m) => m.owner === 'bot').length >= 2, { timeoutMs: 30_000, intervalMs: 20 });
  return { visitor, room: roomOf(res.body.room_url) };
}

test.serial('with 127.0.0.1/32 allowed by the operator, a session tool call reaches the loopback webhook', async (t) => {
  const s = await startSessionServer('session_webhooks_open', { config: { webhookAllowedRanges: ['127.0.0.1/32'] }, sessions: { providers, runner: { tuning: { vadOptions: { stopMs: 500 } } } } });
  servers.push(s);
  const before = hook.received.length;
  const { visitor, room } = await talk(s);
  try {
    const user = visitor.ofType('transcript-turn').find((m) => m.owner === 'user');
    t.is(user?.text, PHRASE, 'the phrase was recognised');
    await until(() => hook.received.length > before, { timeoutMs: 10_000, intervalMs: 20, what: 'the webhook call' });
    const body = JSON.parse(hook.received.at(-1)!.body);
    t.like(body.tool_call_message, { name: 'get_weather', tool_type: 'function', response_required: true });
    t.deepEqual(JSON.parse(body.tool_call_message.parameters), { city: 'Paris' });
  } finally {
    visitor.close();
    await s.release(room);
  }
});

test.serial('without the operator allow-list, the loopback webhook is never called (the tool is dropped for the session)', async (t) => {
  const s = await startSessionServer('session_webhooks_closed', { sessions: { providers, runner: { tuning: { vadOptions: { stopMs: 500 } } } } });
  servers.push(s);
  const before = hook.received.length;
  const { visitor, room } = await talk(s);
  try {
    t.is(visitor.ofType('transcript-turn').find((m) => m.owner === 'user')?.text, PHRASE);
    await new Promise((r) => setTimeout(r, 1000));
    t.is(hook.received.length, before);
  } finally {
    visitor.close();
    await s.release(room);
  }
});
