import test from 'ava';
import { Ajv } from 'ajv';
import { randomBytes } from 'node:crypto';
import { openaiRealtimePlugin } from '../../plugins/openai-realtime/index.ts';
import { startTestServer, type TestServer } from './harness.ts';

let s: TestServer;
let doc: any;
const ajv = new Ajv({ strict: false, allErrors: true });
ajv.addFormat('uuid', /^[0-9a-f-]{36}$/i);
ajv.addFormat('date-time', { validate: (v: string) => !Number.isNaN(Date.parse(v)) });
ajv.addFormat('uri', { validate: (v: string) => URL.canParse(v) });
ajv.addFormat('int64', { type: 'number', validate: Number.isSafeInteger });

test.before(async () => {
  s = await startTestServer({ label: 'shapes', plugins: [openaiRealtimePlugin] });
  doc = (await s.call('GET', '/v1/openapi.json', { key: null })).body;
});
test.after.always(async () => {
  await s?.stop();
});

/** Validates a live response against the schema the OpenAPI document publishes for it. */
function conforms(t: import('ava').ExecutionContext, path: string, method: string, status: number, body: unknown): void {
  const schema = doc.paths[path][method].responses[String(status)].content['application/json'].schema;
  const validate = ajv.compile(schema);
  t.true(validate(body), `${method.toUpperCase()} ${path} ${status}: ${ajv.errorsText(validate.errors)}`);
}

test('every resource response matches the published OpenAPI schema exactly', async (t) => {
  const config = await s.call('POST', '/v1/model-configs', { body: { title: 'shape', model_variant_id: 'svc/test-portrait/v1' } });
  conforms(t, '/model-configs', 'post', 201, config.body);
  conforms(t, '/model-configs', 'get', 200, (await s.call('GET', '/v1/model-configs?source=template')).body);
  conforms(t, '/model-configs/{model_config_id}', 'get', 200, (await s.call('GET', `/v1/model-configs/${config.body.model_config_id}`)).body);
  conforms(t, '/public/model-configs/{model_config_id}', 'get', 200, (await s.call('GET', `/v1/public/model-configs/${config.body.model_config_id}`, { key: null })).body);
  conforms(t, '/model-variants', 'get', 200, (await s.call('GET', '/v1/model-variants')).body);
  conforms(t, '/model-variants/{model_variant_id}', 'get', 200, (await s.call('GET', '/v1/model-variants/svc/test-portrait/v1')).body);
  conforms(t, '/public/model-variants/{model_variant_id}', 'get', 200, (await s.call('GET', '/v1/public/model-variants/svc/test-presence/v1', { key: null })).body);

  const agent = await s.call('POST', '/v1/agents', {
    body: {
      title: 'shape', auth_enabled: true, sts_provider: 'openai-realtime', sts_api_key: 'sk-x', preview_url: 'https://x.example/p.png',
      tools: [{ function: { name: 'c' }, delivery: { mode: 'client' } }, { function: { name: 'w', parameters: { properties: { a: {} } } }, delivery: { mode: 'webhook', url: 'https://h.example' } }],
    },
  });
  conforms(t, '/agents', 'post', 201, agent.body);
  const id = agent.body.agent_id;
  conforms(t, '/agents', 'get', 200, (await s.call('GET', '/v1/agents')).body);
  conforms(t, '/agents/{agent_id}', 'get', 200, (await s.call('GET', `/v1/agents/${id}`)).body);
  conforms(t, '/agents/{agent_id}', 'patch', 200, (await s.call('PATCH', `/v1/agents/${id}`, { body: { description: 'd' } })).body);
  conforms(t, '/agents/{agent_id}/status', 'patch', 200, (await s.call('PATCH', `/v1/agents/${id}/status`, { body: { status: 'published' } })).body);
  conforms(t, '/public/agents/{agent_id}', 'get', 200, (await s.call('GET', `/v1/public/agents/${id}`, { key: null })).body);
  conforms(t, '/agents/providers', 'get', 200, (await s.call('GET', '/v1/agents/providers')).body);
  conforms(t, '/agents/{agent_id}/verify-provider', 'post', 200, (await s.call('POST', `/v1/agents/${id}/verify-provider`)).body);
  const row = await s.server.db('agents').where('agent_id', id).first();
  await s.server.db('agent_calls').insert({
    call_id: '8f14e45f-ceea-467f-a9e3-7a1d7b9f0c11', agent_id: id, organization_id: row.organization_id, session_id: '8f14e45f-ceea-467f-a9e3-7a1d7b9f0c12',
    applied_session_limit_seconds: 60, started_at: new Date().toISOString(), status: 'active',
  });
  conforms(t, '/agents/{agent_id}/calls', 'get', 200, (await s.call('GET', `/v1/agents/${id}/calls`)).body);

  const init = await s.call('POST', '/v1/assets/initiate-upload', { body: { name: 'a.png', category: 'image', content_type: 'image/png' } });
  conforms(t, '/assets/initiate-upload', 'post', 200, init.body);
  const signed = await s.call('POST', '/v1/assets/sign-part', { body: { ...init.body, part_number: 1 } });
  conforms(t, '/assets/sign-part', 'post', 200, signed.body);
  const etag = (await fetch(signed.body.upload_url, { method: 'PUT', body: randomBytes(20) })).headers.get('etag');
  const asset = await s.call('POST', '/v1/assets', { body: { asset_id: init.body.asset_id, upload_id: init.body.upload_id, name: 'a.png', category: 'image', content_type: 'image/png', size_bytes: 20, parts: [{ part_number: 1, etag }] } });
  conforms(t, '/assets', 'post', 201, asset.body);
  conforms(t, '/assets', 'get', 200, (await s.call('GET', '/v1/assets')).body);
  conforms(t, '/assets/{asset_id}', 'get', 200, (await s.call('GET', `/v1/assets/${init.body.asset_id}`)).body);
  conforms(t, '/assets/{asset_id}/download', 'get', 200, (await s.call('GET', `/v1/assets/${init.body.asset_id}/download`)).body);
  conforms(t, '/public/assets/{asset_id}', 'get', 200, (await s.call('GET', `/v1/public/assets/${init.body.asset_id}`, { key: null })).body);
  const job = await s.call('POST', '/v1/assets/generate/idle-v1', { body: { source_asset_id: init.body.asset_id } });
  conforms(t, '/assets/generate/{generator}', 'post', 202, job.body);
  await s.server.settled();
  conforms(t, '/assets/generate/jobs/{job_id}', 'get', 200, (await s.call('GET', `/v1/assets/generate/jobs/${job.body.job_id}`)).body);
  const err = await s.call('GET', `/v1/agents/${init.body.asset_id}`);
  conforms(t, '/agents/{agent_id}', 'get', 404, err.body);
});
