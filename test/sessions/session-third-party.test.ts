/**
 * A third_party agent through the Session API: the provider's conversation (the OpenAI Realtime
 * wire fake, reached through the real SDK), our face on it, a headless WebRTC visitor. The
 * provider key is stored encrypted through the REST API, decrypted only for the session, and
 * never reaches the visitor; a refused key ends the session `failed` with the provider's code.
 */
import test from 'ava';
import { createOpenAIRealtimePlugin } from '../../plugins/openai-realtime/index.ts';
import { RoomVisitor, waitFor } from '../agent/room-visitor.ts';
import { startOpenAIRealtimeFake, type OpenAIRealtimeFake } from '../fakes/openai-realtime.ts';
import { eventually, roomOf, startSessionServer, type SessionTestServer } from './session-harness.ts';

let fake: OpenAIRealtimeFake;
let s: SessionTestServer;

test.before(async () => {
  fake = await startOpenAIRealtimeFake({ replies: ['Welcome aboard, I am Ada.', 'Sunny and warm all day.'], userTranscripts: ['what is the weather'] });
  s = await startSessionServer('session_third_party', { plugins: [createOpenAIRealtimePlugin({ baseURL: fake.baseURL, tls: { ca: fake.ca } })] });
});
test.after.always(async () => {
  await s?.stop();
  await fake?.close();
});

async function thirdPartyAgent(apiKey: string): Promise<string> {
  return s.agent({ mode: 'third_party', sts_provider: 'openai-realtime', sts_api_key: apiKey, provider_config: {}, behaviour: { greeting: 'Welcome aboard, I am Ada.' } });
}

test.serial('a third_party session: the provider greets and answers through our face; the key never reaches the page', async (t) => {
  const agentId = await thirdPartyAgent(fake.apiKey);
  const agent = (await s.call('GET', `/v1/agents/${agentId}`)).body;
  t.true(agent.sts_api_key_set);
  t.false(JSON.stringify(agent).includes(fake.apiKey));
  const res = await s.connect({ agent_id: agentId, client_user_ref: 'tp-visitor' });
  t.is(res.status, 200, res.text);
  const visitor = await RoomVisitor.join(res.body.room_url, res.body.token);
  try {
    t.true(await waitFor(() => visitor.connectionState === 'connected' && visitor.videoFrames > 5, 20_000));
    const readyAt = Date.now();
    visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
    const botTurns = () => visitor.ofType('transcript-turn').filter((m) => m.owner === 'bot');
    t.true(await waitFor(() => botTurns().length >= 1, 20_000));
    t.is(botTurns()[0]!.text, 'Welcome aboard, I am Ada.');
    t.true(visitor.audibleMs(readyAt) > 300, 'the provider audio is heard through the room');
    const burst = new Int16Array(16_000 * 1.1);
    for (let i = 0; i < 16_000 * 0.5; i++) burst[i] = Math.round(9000 * Math.sin((2 * Math.PI * 220 * i) / 16_000));
    visitor.say(burst);
    t.true(await waitFor(() => botTurns().length >= 2, 20_000));
    t.like(visitor.ofType('transcript-turn').find((m) => m.owner === 'user'), { text: 'what is the weather' });
    t.is(botTurns()[1]!.text, 'Sunny and warm all day.');
    t.false(JSON.stringify(visitor.messages).includes(fake.apiKey), 'the provider key never reaches the page');
    t.deepEqual((await s.release(roomOf(res.body.room_url))).body, { released: 1 });
    const call = await eventually(async () => {
      const c = await s.callOf(agentId, res.body.session_id);
      return c?.status !== 'active' && c;
    }, 10_000, 'the call record');
    t.like(call, { status: 'completed', termination_reason: 'client_released', client_user_ref: 'tp-visitor', participant_count: 1 });
  } finally {
    visitor.close();
  }
});

test.serial('a refused provider key ends the session failed with the provider code, told to the page', async (t) => {
  const agentId = await thirdPartyAgent('sk-refused-by-the-provider');
  const res = await s.connect({ agent_id: agentId });
  t.is(res.status, 200, res.text);
  const visitor = await RoomVisitor.join(res.body.room_url, res.body.token);
  try {
    await waitFor(() => visitor.connectionState === 'connected', 20_000);
    visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
    t.true(await waitFor(() => visitor.ofType('session-ended').length === 1, 20_000), JSON.stringify(visitor.messages.map((m) => m.message)));
    t.like(visitor.ofType('error').find((m) => m.fatal === true), { code: 'sts_auth_failed' });
    t.deepEqual(visitor.ofType('session-ended')[0], { type: 'session-ended', reason: 'pipeline_error' });
    const call = await eventually(async () => {
      const c = await s.callOf(agentId, res.body.session_id);
      return c?.status !== 'active' && c;
    }, 10_000, 'the call record');
    t.like(call, { status: 'failed', termination_reason: 'pipeline_error', failure_reason: 'sts_auth_failed' });
    t.truthy(call.metadata.failure_detail);
    t.false(JSON.stringify(call).includes('sk-refused-by-the-provider'));
  } finally {
    visitor.close();
  }
});
