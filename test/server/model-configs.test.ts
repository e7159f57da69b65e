import test from 'ava';
import { randomUUID } from 'node:crypto';
import { until } from '../../testing/until.ts';
import { isErrorBody, startTestServer, type TestServer } from './harness.ts';

let s: TestServer;
test.before(async () => {
  s = await startTestServer({ label: 'configs' });
});
test.after.always(async () => {
  await s?.stop();
});

const create = (title: string, extra: Record<string, unknown> = {}, key?: string) =>
  s.call('POST', '/v1/model-configs', { key, body: { title, model_variant_id: 'svc/test-portrait/v1', ...extra } });

test('create returns 201 with server-set fields and model_configurations default {}', async (t) => {
  const res = await create('first');
  t.is(res.status, 201);
  t.is(res.body.model_id, 'svc/test-portrait');
  t.deepEqual(res.body.model_configurations, {});
  t.regex(res.body.created_by, /^api_key:[0-9a-f-]{36}$/);
  t.regex(res.body.model_config_id, /^[0-9a-f-]{36}$/);
  t.truthy(Date.parse(res.body.created_at));
  t.truthy(res.body.organization_id);
});

test('model_configurations is validated against the variant configuration_schema', async (t) => {
  const ok = await create('schema ok', { model_configurations: { width: 640 } });
  t.is(ok.status, 201);
  t.deepEqual(ok.body.model_configurations, { width: 640 });
  for (const bad of [{ width: 127 }, { width: 1281 }, { width: 'wide' }, { unknown_option: 1 }]) {
    const res = await create(`schema bad ${JSON.stringify(bad)}`, { model_configurations: bad });
    t.is(res.status, 400, JSON.stringify(bad));
    t.is(res.body.code, 'validation_failed');
    t.regex(res.body.details.issues[0].path, /^\/model_configurations/);
  }
  t.is((await create('edge 128', { model_configurations: { width: 128 } })).status, 201);
  t.is((await create('edge 1280', { model_configurations: { width: 1280 } })).status, 201);
});

test('title is required, 1..255 characters, unique per organization (409)', async (t) => {
  t.is((await s.call('POST', '/v1/model-configs', { body: { model_variant_id: 'svc/test-portrait/v1' } })).status, 400);
  t.is((await create('')).status, 400);
  t.is((await create('t'.repeat(255))).status, 201);
  t.is((await create('u'.repeat(256))).status, 400);
  t.is((await create('dup')).status, 201);
  const again = await create('dup');
  t.is(again.status, 409);
  t.is(again.body.code, 'title_conflict');
  t.is((await create('dup', {}, s.keyB)).status, 201, 'another organization may use the same title');
});

test('an unknown or non-public variant is 404 on create', async (t) => {
  const unknown = await s.call('POST', '/v1/model-configs', { body: { title: 'x1', model_variant_id: 'svc/none/v1' } });
  t.is(unknown.status, 404);
  t.is(unknown.body.code, 'model_variant_not_found');
  const internal = await s.call('POST', '/v1/model-configs', { body: { title: 'x2', model_variant_id: 'svc/test-internal/v0' } });
  t.is(internal.status, 404);
});

test('PUT replaces title and model_configurations only; both are required', async (t) => {
  const { body: c } = await create('to replace', { model_configurations: { width: 200 } });
  const res = await s.call('PUT', `/v1/model-configs/${c.model_config_id}`, { body: { title: 'replaced', model_configurations: { width: 300 } } });
  t.is(res.status, 200);
  t.is(res.body.title, 'replaced');
  t.deepEqual(res.body.model_configurations, { width: 300 });
  t.is(res.body.created_at, c.created_at);
  t.true(Date.parse(res.body.updated_at) >= Date.parse(c.updated_at));
  t.is((await s.call('PUT', `/v1/model-configs/${c.model_config_id}`, { body: { title: 'only title' } })).status, 400);
  t.is((await s.call('PUT', `/v1/model-configs/${c.model_config_id}`, { body: { title: 'x', model_configurations: {}, model_variant_id: 'svc/test-presence/v1' } })).status, 400);
  t.is((await s.call('PUT', `/v1/model-configs/${c.model_config_id}`, { body: { title: 'x', model_configurations: { width: 5 } } })).status, 400);
  await create('taken title');
  t.is((await s.call('PUT', `/v1/model-configs/${c.model_config_id}`, { body: { title: 'taken title', model_configurations: {} } })).status, 409);
});

test("another organization's configuration is a 404 on GET, PUT, DELETE and the public read still works", async (t) => {
  const { body: c } = await create('private to a');
  for (const [method, body] of [['GET'], ['PUT', { title: 'x', model_configurations: {} }], ['DELETE']] as const) {
    const res = await s.call(method, `/v1/model-configs/${c.model_config_id}`, { key: s.keyB, body });
    t.is(res.status, 404, method);
    t.is(res.body.code, 'model_config_not_found');
  }
  t.is((await s.call('GET', `/v1/model-configs/${c.model_config_id}`)).status, 200);
  const pub = await s.call('GET', `/v1/public/model-configs/${c.model_config_id}`, { key: null });
  t.is(pub.status, 200);
  t.deepEqual(Object.keys(pub.body).sort(), ['created_at', 'model_config_id', 'model_configurations', 'model_variant_id', 'title', 'updated_at']);
  t.is((await s.call('GET', `/v1/public/model-configs/${randomUUID()}`, { key: null })).status, 404);
});

test('lists are organization-scoped, filterable, and templates come with source=template', async (t) => {
  await create('list presence', { model_variant_id: 'svc/test-presence/v1' });
  const mine = await s.call('GET', '/v1/model-configs?limit=100');
  t.true(mine.body.data.every((c: any) => c.organization_id === mine.body.data[0].organization_id));
  const theirs = await s.call('GET', '/v1/model-configs?limit=100', { key: s.keyB });
  t.false(theirs.body.data.some((c: any) => mine.body.data.some((m: any) => m.model_config_id === c.model_config_id)));
  const byVariant = await s.call('GET', '/v1/model-configs?model_variant_id=svc/test-presence/v1');
  t.true(byVariant.body.data.length >= 1);
  t.true(byVariant.body.data.every((c: any) => c.model_variant_id === 'svc/test-presence/v1'));
  const byTag = await s.call('GET', '/v1/model-configs?model_variant_tag=expressive&limit=100');
  t.true(byTag.body.data.length >= 1);
  t.true(byTag.body.data.every((c: any) => c.model_variant_id === 'svc/test-presence/v1'));
  const templates = await s.call('GET', '/v1/model-configs?source=template');
  t.is(templates.status, 200);
  t.deepEqual(templates.body.data.map((c: any) => c.model_variant_id).sort(), ['svc/test-portrait/v1', 'svc/test-presence/v1']);
  const portrait = templates.body.data.find((c: any) => c.model_variant_id === 'svc/test-portrait/v1');
  t.is(portrait.model_configurations.reference_image_asset_id, '00000000-0000-4000-8000-0000000000a1');
  t.is((await s.call('GET', '/v1/model-configs?source=nope')).status, 400);
});

test('template configurations are readable by every organization and never modifiable (403)', async (t) => {
  const templates = await s.call('GET', '/v1/model-configs?source=template', { key: s.keyB });
  const id = templates.body.data[0].model_config_id;
  t.is((await s.call('GET', `/v1/model-configs/${id}`, { key: s.keyB })).status, 200);
  const del = await s.call('DELETE', `/v1/model-configs/${id}`, { key: s.keyB });
  t.is(del.status, 403);
  t.is(del.body.code, 'template_read_only');
  t.is((await s.call('PUT', `/v1/model-configs/${id}`, { body: { title: 'mine now', model_configurations: {} } })).status, 403);
});

test('DELETE is 204 and then 404; 409 while an agent references it unless referenced_by names that agent', async (t) => {
  const { body: free } = await create('free');
  t.is((await s.call('DELETE', `/v1/model-configs/${free.model_config_id}`)).status, 204);
  t.is((await s.call('GET', `/v1/model-configs/${free.model_config_id}`)).status, 404);

  const { body: used } = await create('used');
  const { body: agent } = await s.call('POST', '/v1/agents', { body: { title: 'face user', face_id: used.model_config_id } });
  t.is(agent.face_id, used.model_config_id);
  const blocked = await s.call('DELETE', `/v1/model-configs/${used.model_config_id}`);
  t.is(blocked.status, 409);
  t.is(blocked.body.code, 'model_config_in_use');
  t.deepEqual(blocked.body.details.agent_ids, [agent.agent_id]);
  const wrongRef = await s.call('DELETE', `/v1/model-configs/${used.model_config_id}?referenced_by=${randomUUID()}`);
  t.is(wrongRef.status, 409);
  t.is((await s.call('DELETE', `/v1/model-configs/${used.model_config_id}?referenced_by=not-uuid`)).status, 400);
  // A uuid in upper case names the same agent (PostgreSQL answers it in lower case).
  const ok = await s.call('DELETE', `/v1/model-configs/${used.model_config_id}?referenced_by=${String(agent.agent_id).toUpperCase()}`);
  t.is(ok.status, 204);
  t.is((await s.call('GET', `/v1/agents/${agent.agent_id}`)).body.face_id, null);
});

test('referenced_by cannot clear references held by other agents', async (t) => {
  const { body: c } = await create('shared face');
  const { body: a1 } = await s.call('POST', '/v1/agents', { body: { title: 'a1', face_id: c.model_config_id } });
  await s.call('POST', '/v1/agents', { body: { title: 'a2', face_id: c.model_config_id } });
  const res = await s.call('DELETE', `/v1/model-configs/${c.model_config_id}?referenced_by=${a1.agent_id}`);
  t.is(res.status, 409);
  t.is((await s.call('GET', `/v1/agents/${a1.agent_id}`)).body.face_id, c.model_config_id, 'nothing changed on refusal');
});

test('variant catalogue: API-key callers see only public variants, status filter ignored', async (t) => {
  const all = await s.call('GET', '/v1/model-variants');
  t.is(all.status, 200);
  t.deepEqual(all.body.data.map((v: any) => v.model_variant_id).sort(), ['svc/test-portrait/v1', 'svc/test-presence/v1']);
  const asked = await s.call('GET', '/v1/model-variants?status=available');
  t.true(asked.body.data.every((v: any) => v.status === 'public'));
  t.is(asked.body.data.length, 2);
  const v = all.body.data.find((x: any) => x.model_variant_id === 'svc/test-portrait/v1');
  t.deepEqual(v.tags, ['portrait', 'realtime']);
  t.is(v.configuration_schema.properties.width.maximum, 1280);
});

test('variant filters: model_id and tags (all must match)', async (t) => {
  const byModel = await s.call('GET', '/v1/model-variants?model_id=svc/test-presence');
  t.deepEqual(byModel.body.data.map((v: any) => v.model_variant_id), ['svc/test-presence/v1']);
  const both = await s.call('GET', '/v1/model-variants?tags=portrait,realtime');
  t.deepEqual(both.body.data.map((v: any) => v.model_variant_id), ['svc/test-portrait/v1']);
  const none = await s.call('GET', '/v1/model-variants?tags=portrait,expressive');
  t.deepEqual(none.body.data, []);
  t.is(none.body.pagination.total_items, 0);
});

test('GET one variant works with encoded or plain slashes; non-public and unknown are 404', async (t) => {
  t.is((await s.call('GET', '/v1/model-variants/svc%2Ftest-portrait%2Fv1')).body.model_variant_id, 'svc/test-portrait/v1');
  t.is((await s.call('GET', '/v1/model-variants/svc/test-portrait/v1')).body.title, 'Test Portrait v1');
  const internal = await s.call('GET', '/v1/model-variants/svc/test-internal/v0');
  t.is(internal.status, 404);
  t.true(isErrorBody(internal.body));
  t.is((await s.call('GET', '/v1/model-variants/svc/none/v9')).status, 404);
  t.is((await s.call('GET', '/v1/model-variants/bad%20id')).status, 400);
});

test('public variant metadata reports frame rate and frame size, and hides non-public variants', async (t) => {
  const res = await s.call('GET', '/v1/public/model-variants/svc/test-portrait/v1', { key: null });
  t.is(res.status, 200);
  t.is(res.body.frame_rate, 25);
  t.deepEqual(res.body.max_frame_size, { width: 1280, height: 720 });
  t.is(res.body.configuration_schema, undefined);
  t.is((await s.call('GET', '/v1/public/model-variants/svc/test-internal/v0', { key: null })).status, 404);
});

test('pagination: limit 1..100 default 20, offset >= 0, total_items counts everything', async (t) => {
  // An organization of its own, so concurrent tests cannot shift the pages.
  const { key } = await s.server.services.apiKeys.create('org-pages', 'pages');
  for (let i = 0; i < 3; i++) await create(`page ${i}`, {}, key);
  const first = await s.call('GET', '/v1/model-configs?limit=1', { key });
  t.is(first.body.data.length, 1);
  t.deepEqual(first.body.pagination, { limit: 1, offset: 0, total_items: first.body.pagination.total_items });
  t.is(first.body.pagination.total_items, 3);
  const second = await s.call('GET', '/v1/model-configs?limit=1&offset=1', { key });
  t.not(second.body.data[0].model_config_id, first.body.data[0].model_config_id);
  const third = await s.call('GET', '/v1/model-configs?limit=1&offset=2', { key });
  t.is(new Set([first, second, third].map((r) => r.body.data[0].model_config_id)).size, 3);
  t.is((await s.call('GET', '/v1/model-configs', { key })).body.pagination.limit, 20);
  t.is((await s.call('GET', '/v1/model-configs?limit=100')).status, 200);
  t.is((await s.call('GET', '/v1/model-configs?limit=101')).status, 400);
  t.is((await s.call('GET', '/v1/model-configs?limit=0')).status, 400);
  t.is((await s.call('GET', '/v1/model-configs?offset=0')).status, 200);
  t.is((await s.call('GET', '/v1/model-configs?offset=-1')).status, 400);
  const beyond = await s.call('GET', '/v1/model-configs?offset=100000', { key });
  t.deepEqual(beyond.body.data, []);
});

test.serial('a face_id write and a DELETE of that configuration at once: the agent never keeps a dangling face_id', async (t) => {
  const { body: config } = await create('raced face');
  const { body: agent } = await s.call('POST', '/v1/agents', { body: { title: 'racer' } });
  // A DELETE of the configuration has locked it and is about to remove it (as the service's own
  // DELETE does first); the PATCH arrives meanwhile.
  const holder = await s.server.db.transaction();
  try {
    await holder('model_configs').where('model_config_id', config.model_config_id).forUpdate().first('model_config_id');
    const holderPid = (await holder.raw('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    const patch = s.call('PATCH', `/v1/agents/${agent.agent_id}`, { body: { face_id: config.model_config_id } });
    // The PATCH waits on the configuration's lock: a session blocked by this transaction.
    await until(async () => Number((await s.server.db.raw('SELECT count(*) AS n FROM pg_stat_activity WHERE ? = ANY(pg_blocking_pids(pid))', [holderPid])).rows[0].n) > 0, { timeoutMs: 30_000, intervalMs: 10, what: 'the PATCH to wait for the lock' });
    await holder('model_configs').where('model_config_id', config.model_config_id).delete();
    await holder.commit();
    const res = await patch;
    t.is(res.status, 400, res.text);
    t.is(res.body.code, 'validation_failed');
  } finally {
    if (!holder.isCompleted()) await holder.rollback();
  }
  t.is((await s.call('GET', `/v1/agents/${agent.agent_id}`)).body.face_id, null, 'no reference to a configuration that is gone');
});
