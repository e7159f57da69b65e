import type { ExecutionContext } from 'ava';
import { randomBytes } from 'node:crypto';
import type { TestServer } from './harness.ts';

/** Creates one of everything, restarts, and reads it all back (shared by the PG and PGlite runs). */
export async function exerciseRestart(t: ExecutionContext, first: TestServer, fakeKey: string): Promise<TestServer> {
  const config = (await first.call('POST', '/v1/model-configs', { body: { title: 'persisted', model_variant_id: 'svc/test-portrait/v1', model_configurations: { width: 256 } } })).body;
  const agent = (await first.call('POST', '/v1/agents', {
    body: { title: 'persisted agent', face_id: config.model_config_id, sts_provider: 'openai-realtime', sts_api_key: fakeKey, tools: [{ function: { name: 'kept' }, delivery: { mode: 'client' } }] },
  })).body;
  await first.call('PATCH', `/v1/agents/${agent.agent_id}/status`, { body: { status: 'published' } });
  const bytes = randomBytes(4096);
  const init = (await first.call('POST', '/v1/assets/initiate-upload', { body: { name: 'keep.bin', category: 'weight' } })).body;
  const signed = (await first.call('POST', '/v1/assets/sign-part', { body: { ...init, part_number: 1 } })).body;
  const etag = (await fetch(signed.upload_url, { method: 'PUT', body: bytes })).headers.get('etag');
  const asset = (await first.call('POST', '/v1/assets', { body: { asset_id: init.asset_id, upload_id: init.upload_id, name: 'keep.bin', category: 'weight', content_type: null, size_bytes: 4096, parts: [{ part_number: 1, etag }] } })).body;

  // An upload left open across the restart: part sent before, finalize after.
  const openBytes = randomBytes(3000);
  const open = (await first.call('POST', '/v1/assets/initiate-upload', { body: { name: 'open.bin', category: 'weight' } })).body;
  const openSigned = (await first.call('POST', '/v1/assets/sign-part', { body: { ...open, part_number: 1 } })).body;
  const openEtag = (await fetch(openSigned.upload_url, { method: 'PUT', body: openBytes })).headers.get('etag');

  const second = await first.restart();
  const finalized = await second.call('POST', '/v1/assets', {
    body: { asset_id: open.asset_id, upload_id: open.upload_id, name: 'open.bin', category: 'weight', content_type: null, size_bytes: 3000, parts: [{ part_number: 1, etag: openEtag }] },
  });
  t.is(finalized.status, 201, 'an upload opened before the restart can be finalized after it');
  t.true(Buffer.from(await (await fetch(finalized.body.asset_url)).arrayBuffer()).equals(openBytes));
  t.not(second.url, '', 'listening again');
  const a = await second.call('GET', `/v1/agents/${agent.agent_id}`);
  t.is(a.status, 200, 'the API key still works');
  t.is(a.body.status, 'published');
  t.is(a.body.face_id, config.model_config_id);
  t.true(a.body.sts_api_key_set);
  t.deepEqual(a.body.tools.map((x: any) => [x.tool_id, x.function.name]), agent.tools.map((x: any) => [x.tool_id, x.function.name]));
  t.deepEqual((await second.call('GET', `/v1/model-configs/${config.model_config_id}`)).body.model_configurations, { width: 256 });
  const verify = await second.call('POST', `/v1/agents/${agent.agent_id}/verify-provider`);
  t.true(verify.body.valid, 'the encrypted provider key still decrypts');
  const again = await second.call('GET', `/v1/assets/${asset.asset_id}`);
  t.true(Buffer.from(await (await fetch(again.body.asset_url)).arrayBuffer()).equals(bytes));
  t.is((await second.call('GET', '/v1/model-configs?source=template')).body.pagination.total_items, 2, 'seeding is idempotent');
  t.is((await second.call('GET', '/v1/assets?source=template')).body.pagination.total_items, 1);
  return second;
}

