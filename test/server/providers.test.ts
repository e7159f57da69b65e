import { createServer, type AddressInfo } from 'node:net';
import test from 'ava';
import { createOpenAIRealtimePlugin } from '../../plugins/openai-realtime/index.ts';
import { startFakeOpenAIModels, type FakeOpenAIModels } from '../fakes/openai-models.ts';
import { startTestServer, type TestServer } from './harness.ts';

const GOOD_KEY = 'sk-test-good-key-000000000000';
let s: TestServer;
let fake: FakeOpenAIModels;

test.before(async () => {
  fake = await startFakeOpenAIModels({ validKeys: [GOOD_KEY], models: ['gpt-realtime', 'gpt-4o-realtime-preview'] });
  s = await startTestServer({ label: 'providers', plugins: [createOpenAIRealtimePlugin({ baseURL: fake.baseURL })] });
});
test.after.always(async () => {
  await s?.stop();
  await fake?.close();
});

const agentWith = async (fields: Record<string, unknown>) =>
  (await s.call('POST', '/v1/agents', { body: { title: 'sts agent', mode: 'third_party', ...fields } })).body;

test.serial('GET /v1/agents/providers lists the registered sts plugins with descriptor fields', async (t) => {
  const res = await s.call('GET', '/v1/agents/providers');
  t.is(res.status, 200);
  t.deepEqual(res.body, [{
    slug: 'openai-realtime', label: 'OpenAI Realtime', required_persisted: [],
    optional_persisted: ['voice', 'temperature', 'turn_detection'], session_fields: ['instructions', 'voice'], status: 'available',
  }]);
  t.is((await s.call('GET', '/v1/agents/providers', { key: null })).status, 401);
});

test.serial('verify-provider succeeds with a good stored key, calling the provider with it', async (t) => {
  const a = await agentWith({ sts_provider: 'openai-realtime', sts_api_key: GOOD_KEY, sts_config_id: 'gpt-4o-realtime-preview' });
  const before = fake.requests.length;
  const res = await s.call('POST', `/v1/agents/${a.agent_id}/verify-provider`);
  t.is(res.status, 200);
  t.deepEqual(res.body, { valid: true, provider: 'openai-realtime' });
  const seen = fake.requests.slice(before);
  t.deepEqual(seen, [{ method: 'GET', path: '/v1/models/gpt-4o-realtime-preview', token: GOOD_KEY }]);
});

test.serial('verify-provider reports a rejected key as valid=false with the provider error', async (t) => {
  const a = await agentWith({ sts_provider: 'openai-realtime', sts_api_key: 'sk-wrong-key-123456' });
  const res = await s.call('POST', `/v1/agents/${a.agent_id}/verify-provider`);
  t.is(res.status, 200);
  t.false(res.body.valid);
  t.is(res.body.provider, 'openai-realtime');
  t.regex(res.body.error, /authentication failed.*Incorrect API key/);
  t.false(res.body.error.includes('sk-wrong-key-123456'), 'the full key is not echoed');
});

test.serial('verify-provider reports an unknown model (sts_config_id) as valid=false', async (t) => {
  const a = await agentWith({ sts_provider: 'openai-realtime', sts_api_key: GOOD_KEY, sts_config_id: 'no-such-model' });
  const res = await s.call('POST', `/v1/agents/${a.agent_id}/verify-provider`);
  t.false(res.body.valid);
  t.regex(res.body.error, /no-such-model/);
});

test.serial('verify-provider without provider or without key is valid=false and calls nobody', async (t) => {
  const before = fake.requests.length;
  const none = await agentWith({});
  const r1 = await s.call('POST', `/v1/agents/${none.agent_id}/verify-provider`);
  t.deepEqual(r1.body, { valid: false, provider: '', error: 'the agent has no sts_provider' });
  const noKey = await agentWith({ sts_provider: 'openai-realtime' });
  const r2 = await s.call('POST', `/v1/agents/${noKey.agent_id}/verify-provider`);
  t.false(r2.body.valid);
  t.regex(r2.body.error, /no sts_api_key/);
  t.is(fake.requests.length, before);
});

test.serial('verify-provider never modifies the agent', async (t) => {
  const a = await agentWith({ sts_provider: 'openai-realtime', sts_api_key: 'sk-bad-0000000', sts_config_id: 'gpt-realtime' });
  const row = await s.server.db('agents').where('agent_id', a.agent_id).first();
  await s.call('POST', `/v1/agents/${a.agent_id}/verify-provider`);
  const after = await s.server.db('agents').where('agent_id', a.agent_id).first();
  t.deepEqual(after, row);
});

test.serial('an unreachable provider is valid=false, not a server error', async (t) => {
  // A port this test holds, whose every connection is dropped at once. (A fake closed before the
  // call freed its port, and a loaded CI run gave it to another test's server, which answered 404.)
  const dropping = createServer((socket) => socket.destroy());
  await new Promise<void>((resolve) => dropping.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => dropping.close(() => resolve())));
  const baseURL = `http://127.0.0.1:${(dropping.address() as AddressInfo).port}/v1`;
  const s2 = await startTestServer({ label: 'providers_down', plugins: [createOpenAIRealtimePlugin({ baseURL, verifyTimeoutMs: 2000 })] });
  try {
    const a = (await s2.call('POST', '/v1/agents', { body: { title: 'x', sts_provider: 'openai-realtime', sts_api_key: GOOD_KEY } })).body;
    const res = await s2.call('POST', `/v1/agents/${a.agent_id}/verify-provider`);
    t.is(res.status, 200);
    t.false(res.body.valid);
    t.regex(res.body.error, /unreachable|connection/i);
  } finally {
    await s2.stop();
  }
});
