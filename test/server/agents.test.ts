import test from 'ava';
import { randomUUID } from 'node:crypto';
import type { Plugin } from '../../core/registry.ts';
import { openaiRealtimePlugin } from '../../plugins/openai-realtime/index.ts';
import { isErrorBody, startTestServer, type TestServer } from './harness.ts';

/** A speech-to-speech provider whose slug is exactly the spec's 100-character limit. */
const LONG_STS_SLUG = 'p'.repeat(100);
const longStsPlugin: Plugin = {
  name: 'test-long-sts',
  register(registry) {
    registry.register('sts', LONG_STS_SLUG, () => ({}), {
      label: 'long slug',
      descriptor: { slug: LONG_STS_SLUG, label: 'long slug', required_persisted: [], optional_persisted: [], session_fields: [], status: 'available' },
    });
  },
};

/** Two TTS plugins registered through the plugin API (factories unused by the REST API). */
const ttsPlugin: Plugin = {
  name: 'test-tts',
  register(registry) {
    registry.register('tts', 'local', () => ({}));
    registry.register('tts', 'elevenlabs', () => ({}));
  },
};

let s: TestServer;
test.before(async () => {
  s = await startTestServer({ label: 'agents', plugins: [openaiRealtimePlugin, ttsPlugin, longStsPlugin] });
});
test.after.always(async () => {
  await s?.stop();
});

const newAgent = async (body: Record<string, unknown> = {}, key?: string) => {
  const res = await s.call('POST', '/v1/agents', { key, body: { title: 'agent', ...body } });
  if (res.status !== 201) throw new Error(`create failed ${res.status} ${res.text}`);
  return res.body;
};
const patch = (id: string, body: unknown, key?: string) => s.call('PATCH', `/v1/agents/${id}`, { key, body });

test('a new agent has every field with the documented defaults, unpublished', async (t) => {
  const a = await newAgent({ title: 'Defaults' });
  t.is(a.status, 'unpublished');
  t.is(a.mode, 'svc');
  t.is(a.language, 'en');
  t.is(a.tts_provider, 'local');
  t.is(a.session_limit_seconds, 600);
  t.is(a.max_concurrency, 5);
  t.false(a.auth_enabled);
  t.false(a.auth_secret_set);
  t.is(a.auth_secret, null);
  t.false(a.sts_api_key_set);
  t.is(a.allowed_hostnames, null);
  t.deepEqual(a.tools, []);
  t.is(a.behaviour.greeting_mode, 'verbatim');
  t.true(a.behaviour.allow_interruption);
  t.deepEqual(a.advanced, { max_video_source_dimension: 1280, llm_max_tokens: 1024 });
  t.regex(a.created_by, /^api_key:/);
  t.is(a.sts_api_key, undefined);
});

test('create takes mode and title is required', async (t) => {
  t.is((await newAgent({ mode: 'third_party' })).mode, 'third_party');
  t.is((await s.call('POST', '/v1/agents', { body: { mode: 'svc' } })).status, 400);
  t.is((await s.call('POST', '/v1/agents', { body: { title: 'x', mode: 'other' } })).status, 400);
});

/** Each limit from the spec, probed on both sides of every bound through PATCH. */
const LIMITS: Array<[string, unknown, unknown]> = [
  ['title', 't'.repeat(255), 't'.repeat(256)],
  ['title', 't', ''],
  ['description', 'd'.repeat(1000), 'd'.repeat(1001)],
  ['system_prompt', 's'.repeat(10000), 's'.repeat(10001)],
  ['voice_id', 'v'.repeat(255), 'v'.repeat(256)],
  ['sts_config_id', 'c'.repeat(255), 'c'.repeat(256)],
  ['sts_api_key', 'k'.repeat(1000), 'k'.repeat(1001)],
  ['preview_url', `https://example.com/${'p'.repeat(2048 - 20)}`, `https://example.com/${'p'.repeat(2049 - 20)}`],
  ['session_limit_seconds', 1, 0],
  ['session_limit_seconds', 86400, 86401],
  ['max_concurrency', -1, -2],
  ['max_concurrency', 1, 0],
  ['max_concurrency', 100, 101],
  ['language', 'fr', 'xx'],
  ['mode', 'third_party', 'both'],
  ['starts_conversation', false, 'no'],
  ['allowed_hostnames', ['example.com', 'localhost', '127.0.0.1', '[::1]', '*'], ['https://example.com/path']],
  ['allowed_hostnames', ['shop.example.org'], ['*.example.org']],
  ['allowed_hostnames', ['localhost'], ['localhost:3000']],
  ['preview_url', '8f14e45f-ceea-467f-a9e3-7a1d7b9f0c11', 'not a url'],
  ['behaviour', { greeting_mode: 'generated' }, { greeting_mode: 'shout' }],
  ['behaviour', { max_conversation_duration_seconds: 86400 }, { max_conversation_duration_seconds: 0 }],
  ['advanced', { llm_max_tokens: 1 }, { llm_max_tokens: 0 }],
  ['advanced', { max_video_source_dimension: 4096 }, { max_video_source_dimension: 4097 }],
  ['behaviour', { greeting: 'g'.repeat(2000) }, { greeting: 'g'.repeat(2001) }],
  ['behaviour', { inactivity_nudge_seconds: 3600 }, { inactivity_nudge_seconds: 3601 }],
  ['behaviour', { inactivity_nudge_seconds: 0 }, { inactivity_nudge_seconds: -1 }],
  ['allowed_hostnames', Array.from({ length: 100 }, (_, i) => `h${i}.example.com`), Array.from({ length: 101 }, (_, i) => `h${i}.example.com`)],
  ['allowed_hostnames', [`${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(57)}.com`], [`${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(58)}.com`]],
  ['provider_config', { blob: 'x'.repeat(16_000) }, { blob: 'x'.repeat(16_400) }],
  ['tools', Array.from({ length: 64 }, (_, i) => ({ function: { name: `t${i}` }, delivery: { mode: 'client' } })), Array.from({ length: 65 }, (_, i) => ({ function: { name: `t${i}` }, delivery: { mode: 'client' } }))],
];

test('every agent field limit accepts its bound and rejects one past it', async (t) => {
  const a = await newAgent();
  for (const [field, ok, bad] of LIMITS) {
    const good = await patch(a.agent_id, { [field]: ok });
    t.is(good.status, 200, `${field}=${JSON.stringify(ok).slice(0, 40)} ${good.text.slice(0, 200)}`);
    const res = await patch(a.agent_id, { [field]: bad });
    t.is(res.status, 400, `${field}=${JSON.stringify(bad).slice(0, 40)}`);
    t.true(isErrorBody(res.body));
  }
  t.is((await patch(a.agent_id, { sts_provider: LONG_STS_SLUG })).status, 200, 'sts_provider: 100 characters');
  t.is((await patch(a.agent_id, { sts_provider: 'p'.repeat(101) })).status, 400);
});

test('turn-taking settings in advanced: stored when valid; out of range, wrongly typed or inconsistent is a 400 and nothing is stored', async (t) => {
  const a = await newAgent();
  const turn = { turn_pause_ms: 300, turn_unsure_ms: 800, turn_incomplete_ms: 2000, preemptive_generation: false, resume_false_interruptions: false, false_interruption_ms: 400, backchannel_words: ['si si', 'claro'] };
  const good = await patch(a.agent_id, { advanced: turn });
  t.is(good.status, 200, good.text);
  t.like(good.body.advanced, { ...turn, llm_max_tokens: 1024 });
  const bad: Array<[Record<string, unknown>, string]> = [
    [{ turn_pause_ms: 99 }, '/advanced/turn_pause_ms'],
    [{ turn_pause_ms: 2001 }, '/advanced/turn_pause_ms'],
    [{ turn_pause_ms: '300' }, '/advanced/turn_pause_ms'],
    [{ turn_pause_ms: 250.5 }, '/advanced/turn_pause_ms'],
    [{ turn_unsure_ms: 5001 }, '/advanced/turn_unsure_ms'],
    [{ turn_incomplete_ms: 10_001 }, '/advanced/turn_incomplete_ms'],
    [{ false_interruption_ms: 99 }, '/advanced/false_interruption_ms'],
    [{ preemptive_generation: 'yes' }, '/advanced/preemptive_generation'],
    [{ resume_false_interruptions: 1 }, '/advanced/resume_false_interruptions'],
    [{ backchannel_words: 'uh-huh' }, '/advanced/backchannel_words'],
    [{ backchannel_words: [''] }, '/advanced/backchannel_words/0'],
    [{ backchannel_words: ['x'.repeat(41)] }, '/advanced/backchannel_words/0'],
    [{ backchannel_words: Array.from({ length: 51 }, (_, i) => `w${i}`) }, '/advanced/backchannel_words'],
    // Inconsistent with what is stored: the unsure bound under the pause, the incomplete under the unsure.
    [{ turn_unsure_ms: 250 }, '/advanced/turn_unsure_ms'],
    [{ turn_incomplete_ms: 700 }, '/advanced/turn_incomplete_ms'],
    [{ turn_pause_ms: 900 }, '/advanced/turn_unsure_ms'],
  ];
  for (const [advanced, path] of bad) {
    const res = await patch(a.agent_id, { advanced });
    t.is(res.status, 400, JSON.stringify(advanced).slice(0, 60));
    t.true(isErrorBody(res.body));
    t.is(res.body.code, 'validation_failed');
    t.true(JSON.stringify(res.body.details ?? {}).includes(path), `${JSON.stringify(advanced).slice(0, 60)}: ${res.text.slice(0, 300)}`);
  }
  const after = await s.call('GET', `/v1/agents/${a.agent_id}`);
  t.like(after.body.advanced, turn, 'nothing stored by the refused requests');
  // The bounds are checked on create too.
  const refused = await s.call('POST', '/v1/agents', { body: { title: 'agent', advanced: { turn_unsure_ms: 150 } } });
  t.is(refused.status, 400);
});

test('sts_provider must name an installed speech-to-speech provider', async (t) => {
  const a = await newAgent();
  t.is((await patch(a.agent_id, { sts_provider: 'openai-realtime' })).body.sts_provider, 'openai-realtime');
  const res = await patch(a.agent_id, { sts_provider: 'nobody' });
  t.is(res.status, 400);
  t.deepEqual(res.body.details.known, ['openai-realtime', LONG_STS_SLUG]);
  t.is((await patch(a.agent_id, { sts_provider: null })).body.sts_provider, null);
});

test('tts_provider must name an installed TTS plugin when any is installed', async (t) => {
  const a = await newAgent();
  t.is((await patch(a.agent_id, { tts_provider: 'elevenlabs' })).body.tts_provider, 'elevenlabs');
  const res = await patch(a.agent_id, { tts_provider: 'nobody' });
  t.is(res.status, 400);
  t.deepEqual(res.body.details.known, ['elevenlabs', 'local']);
  t.is((await patch(a.agent_id, { tts_provider: 'Bad Slug' })).status, 400);
});

test('PATCH is partial: omitted fields stay, nulls clear, behaviour and advanced merge', async (t) => {
  const a = await newAgent({ description: 'keep me', system_prompt: 'be kind' });
  const res = await patch(a.agent_id, { system_prompt: null, behaviour: { greeting: 'Hello!' } });
  t.is(res.status, 200);
  t.is(res.body.description, 'keep me');
  t.is(res.body.system_prompt, null);
  t.is(res.body.behaviour.greeting, 'Hello!');
  t.is(res.body.behaviour.allow_interruption, true);
  const again = await patch(a.agent_id, { behaviour: { allow_interruption: false }, provider_config: { voice: 'alloy' } });
  t.is(again.body.behaviour.greeting, 'Hello!');
  t.false(again.body.behaviour.allow_interruption);
  t.deepEqual(again.body.provider_config, { voice: 'alloy' });
  const empty = await patch(a.agent_id, {});
  t.is(empty.status, 200);
  t.is(empty.body.description, 'keep me');
});

test('read-only fields cannot be written', async (t) => {
  const a = await newAgent();
  for (const field of ['agent_id', 'organization_id', 'created_by', 'status', 'sts_api_key_set', 'auth_secret', 'created_at']) {
    t.is((await patch(a.agent_id, { [field]: 'x' })).status, 400, field);
  }
});

test('face_id must be a model configuration visible to the organization', async (t) => {
  const a = await newAgent();
  const templates = await s.call('GET', '/v1/model-configs?source=template');
  t.is((await patch(a.agent_id, { face_id: templates.body.data[0].model_config_id })).status, 200);
  const other = await s.call('POST', '/v1/model-configs', { key: s.keyB, body: { title: 'b face', model_variant_id: 'svc/test-portrait/v1' } });
  t.is((await patch(a.agent_id, { face_id: other.body.model_config_id })).status, 400);
  t.is((await patch(a.agent_id, { face_id: randomUUID() })).status, 400);
  t.is((await patch(a.agent_id, { face_id: null })).body.face_id, null);
});

test('sts_api_key is write-only and stored AES-GCM encrypted; null clears it', async (t) => {
  const a = await newAgent();
  const secret = 'sk-live-should-never-be-visible-1234567890';
  const res = await patch(a.agent_id, { sts_api_key: secret });
  t.true(res.body.sts_api_key_set);
  t.false(res.text.includes(secret));
  t.false((await s.call('GET', `/v1/agents/${a.agent_id}`)).text.includes(secret));
  const row = await s.server.db('agents').where('agent_id', a.agent_id).first();
  t.false(JSON.stringify(row).includes(secret));
  t.regex(row.sts_api_key_encrypted, /^v1\./);
  t.is((await s.server.services.agents.providerKey({ organizationId: row.organization_id, apiKeyId: '', createdBy: '' }, a.agent_id)).apiKey, secret);
  t.false((await patch(a.agent_id, { sts_api_key: null })).body.sts_api_key_set);
});

test('auth_secret is returned once on creation when auth_enabled, then null', async (t) => {
  const a = await newAgent({ auth_enabled: true });
  t.true(a.auth_enabled);
  t.true(a.auth_secret_set);
  t.regex(a.auth_secret, /^svc_as_[A-Za-z0-9_-]{40,}$/);
  const read = await s.call('GET', `/v1/agents/${a.agent_id}`);
  t.is(read.body.auth_secret, null);
  t.true(read.body.auth_secret_set);
  t.false(read.text.includes(a.auth_secret));
  const row = await s.server.db('agents').where('agent_id', a.agent_id).first();
  t.false(JSON.stringify(row).includes(a.auth_secret));
  t.is((await patch(a.agent_id, { title: 'other' })).body.auth_secret, null);
  t.is(s.server.services.agents.authSecretOf(row), a.auth_secret, 'the Session API can read the stored secret back');
  t.is((await newAgent({ auth_enabled: false })).auth_secret, null);
});

test('enabling auth later creates a secret shown once in that PATCH response only', async (t) => {
  const a = await newAgent();
  const on = await patch(a.agent_id, { auth_enabled: true });
  t.regex(on.body.auth_secret, /^svc_as_/);
  const off = await patch(a.agent_id, { auth_enabled: false });
  t.is(off.body.auth_secret, null);
  t.true(off.body.auth_secret_set, 'secret kept while disabled');
  t.is((await patch(a.agent_id, { auth_enabled: true })).body.auth_secret, null, 'no new secret when one is stored');
});

test('status PATCH publishes and unpublishes; other values are 400', async (t) => {
  const a = await newAgent();
  const pub = await s.call('PATCH', `/v1/agents/${a.agent_id}/status`, { body: { status: 'published' } });
  t.is(pub.status, 200);
  t.is(pub.body.status, 'published');
  t.is(pub.body.tools.length, 0);
  t.is((await s.call('PATCH', `/v1/agents/${a.agent_id}/status`, { body: { status: 'unpublished' } })).body.status, 'unpublished');
  t.is((await s.call('PATCH', `/v1/agents/${a.agent_id}/status`, { body: { status: 'draft' } })).status, 400);
  t.is((await s.call('PATCH', `/v1/agents/${a.agent_id}/status`, { body: {} })).status, 400);
});

test('the list returns only summary fields, scoped to the organization', async (t) => {
  const { key } = await s.server.services.apiKeys.create('org-list', 'list');
  const a = await newAgent({ title: 'listed', system_prompt: 'secret prompt' }, key);
  await newAgent({ title: 'other org' }, s.keyB);
  const res = await s.call('GET', '/v1/agents', { key });
  t.is(res.status, 200);
  t.is(res.body.pagination.total_items, 1);
  t.deepEqual(Object.keys(res.body.data[0]).sort(), ['agent_id', 'created_at', 'created_by', 'description', 'face_id', 'mode', 'organization_id', 'status', 'title', 'updated_at']);
  t.is(res.body.data[0].agent_id, a.agent_id);
  const full = await s.call('GET', `/v1/agents/${a.agent_id}`, { key });
  t.is(res.body.data[0].created_at, full.body.created_at, 'list and GET format timestamps identically');
  t.is(res.body.data[0].updated_at, full.body.updated_at);
  t.regex(res.body.data[0].created_at, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
});

test('the list is newest first, and a page past the end still counts every agent', async (t) => {
  const { key } = await s.server.services.apiKeys.create('org-order', 'order');
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) ids.push((await newAgent({ title: `ordered ${i}` }, key)).agent_id);
  const page = await s.call('GET', '/v1/agents?limit=2', { key });
  t.deepEqual(page.body.data.map((x: any) => x.agent_id), [ids[2], ids[1]]);
  t.deepEqual(page.body.pagination, { limit: 2, offset: 0, total_items: 3 });
  const rest = await s.call('GET', '/v1/agents?limit=2&offset=2', { key });
  t.deepEqual(rest.body.data.map((x: any) => x.agent_id), [ids[0]]);
  const past = await s.call('GET', '/v1/agents?offset=10', { key });
  t.deepEqual(past.body.data, []);
  t.is(past.body.pagination.total_items, 3);
});

test("another organization's agent is a 404 on every agent route, and nothing changes", async (t) => {
  const a = await newAgent({ title: 'mine' });
  const routes: Array<[string, string, unknown?]> = [
    ['GET', `/v1/agents/${a.agent_id}`],
    ['PATCH', `/v1/agents/${a.agent_id}`, { title: 'stolen' }],
    ['DELETE', `/v1/agents/${a.agent_id}`],
    ['PATCH', `/v1/agents/${a.agent_id}/status`, { status: 'published' }],
    ['GET', `/v1/agents/${a.agent_id}/calls`],
    ['POST', `/v1/agents/${a.agent_id}/verify-provider`],
  ];
  for (const [method, path, body] of routes) {
    const res = await s.call(method, path, { key: s.keyB, body });
    t.is(res.status, 404, `${method} ${path}`);
    t.is(res.body.code, 'agent_not_found');
  }
  const still = await s.call('GET', `/v1/agents/${a.agent_id}`);
  t.is(still.body.title, 'mine');
  t.is(still.body.status, 'unpublished');
});

test('unknown agent ids are 404', async (t) => {
  t.is((await s.call('GET', `/v1/agents/${randomUUID()}`)).status, 404);
  t.is((await s.call('DELETE', `/v1/agents/${randomUUID()}`)).status, 404);
});

test('DELETE is a hard delete (204 then 404), refused with 409 while a session lease is live', async (t) => {
  const a = await newAgent();
  const row = await s.server.db('agents').where('agent_id', a.agent_id).first();
  const session = {
    session_id: randomUUID(), agent_id: a.agent_id, organization_id: row.organization_id, room: `room-${randomUUID()}`,
    applied_session_limit_seconds: 600, lease_expires_at: new Date(Date.now() + 60_000),
  };
  await s.server.db('agent_sessions').insert(session);
  const blocked = await s.call('DELETE', `/v1/agents/${a.agent_id}`);
  t.is(blocked.status, 409);
  t.is(blocked.body.code, 'agent_has_active_sessions');
  t.is(blocked.body.details.active_sessions, 1);
  await s.server.db('agent_sessions').where('session_id', session.session_id).update({ lease_expires_at: new Date(Date.now() - 1000) });
  t.is((await s.call('DELETE', `/v1/agents/${a.agent_id}`)).status, 204);
  t.is((await s.call('GET', `/v1/agents/${a.agent_id}`)).status, 404);
  t.is(await s.server.db('agent_tools').where('agent_id', a.agent_id).first(), undefined);
});

test('presets: create seeds fields and tools from an agent of the organization or the templates', async (t) => {
  const preset = await newAgent({
    title: 'preset', system_prompt: 'You sell bikes.', language: 'de',
    tools: [{ function: { name: 'lookup' }, delivery: { mode: 'client' } }],
  });
  const copy = await newAgent({ title: 'from preset', preset_id: preset.agent_id });
  t.is(copy.system_prompt, 'You sell bikes.');
  t.is(copy.language, 'de');
  t.is(copy.title, 'from preset');
  t.is(copy.tools[0].function.name, 'lookup');
  t.not(copy.tools[0].tool_id, preset.tools[0].tool_id);
  const foreign = await s.call('POST', '/v1/agents', { key: s.keyB, body: { title: 'x', preset_id: preset.agent_id } });
  t.is(foreign.status, 404);
});
