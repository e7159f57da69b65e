import test from 'ava';
import { isErrorBody, startTestServer, type TestServer } from './harness.ts';

let s: TestServer;
test.before(async () => {
  s = await startTestServer({ label: 'http' });
});
test.after.always(async () => {
  await s?.stop();
});

test('authenticated routes refuse a missing key with 401 in the error shape', async (t) => {
  const res = await s.call('GET', '/v1/agents', { key: null });
  t.is(res.status, 401);
  t.true(isErrorBody(res.body));
  t.is(res.body.code, 'unauthorized');
});

test('an unknown, an overlong, or a revoked key is 401', async (t) => {
  t.is((await s.call('GET', '/v1/agents', { key: 'svc_nope' })).status, 401);
  t.is((await s.call('GET', '/v1/agents', { key: 'x'.repeat(5000) })).status, 401);
  const created = await s.server.services.apiKeys.create('org-a', 'to revoke');
  t.is((await s.call('GET', '/v1/agents', { key: created.key })).status, 200);
  t.true(await s.server.services.apiKeys.revoke(created.api_key_id));
  const res = await s.call('GET', '/v1/agents', { key: created.key });
  t.is(res.status, 401);
  t.true(isErrorBody(res.body));
});

test('keys are stored as hashes with a display prefix, never in clear', async (t) => {
  const created = await s.server.services.apiKeys.create('org-a', 'hash check');
  const row = await s.server.db('api_keys').where('api_key_id', created.api_key_id).first();
  t.not(row.key_hash, created.key);
  t.false(JSON.stringify(row).includes(created.key));
  t.true(created.key.startsWith(row.prefix));
  t.is(row.key_hash.length, 64);
});

test('malformed JSON is 400 invalid_json', async (t) => {
  const res = await s.call('POST', '/v1/agents', { raw: '{"title": ', headers: { 'content-type': 'application/json' } });
  t.is(res.status, 400);
  t.is(res.body.code, 'invalid_json');
  t.true(isErrorBody(res.body));
});

test('a non-JSON media type is 415 in the error shape', async (t) => {
  const res = await s.call('POST', '/v1/agents', { raw: 'title=a', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
  t.is(res.status, 415);
  t.is(res.body.code, 'unsupported_media_type');
});

test('wrong JSON types are 400 validation_failed with issues', async (t) => {
  for (const body of [{ title: 5 }, [], 'text', null, { title: 'a', session_limit_seconds: '60' }, { title: 'a', tools: {} }]) {
    const res = await s.call('POST', '/v1/agents', { body });
    t.is(res.status, 400, JSON.stringify(body));
    t.is(res.body.code, 'validation_failed');
    t.true(isErrorBody(res.body));
  }
});

test('a missing body where one is required is 400', async (t) => {
  const res = await s.call('POST', '/v1/agents');
  t.is(res.status, 400);
  t.is(res.body.code, 'validation_failed');
});

test('a body above 1 MB is 413 payload_too_large, and the server keeps serving', async (t) => {
  const res = await s.call('POST', '/v1/agents', { body: { title: 'a', system_prompt: 'x'.repeat(1_100_000) } });
  t.is(res.status, 413);
  t.is(res.body.code, 'payload_too_large');
  t.is((await s.call('GET', '/v1/agents')).status, 200);
});

test('unknown fields are rejected with the offending property named', async (t) => {
  const res = await s.call('POST', '/v1/agents', { body: { title: 'a', colour: 'red' } });
  t.is(res.status, 400);
  t.is(res.body.details.issues[0].property, 'colour');
});

test('non-UUID ids on every id-taking route are 400, never 5xx', async (t) => {
  const routes: Array<[string, string]> = [
    ['GET', '/v1/agents/not-a-uuid'], ['PATCH', '/v1/agents/not-a-uuid'], ['DELETE', '/v1/agents/not-a-uuid'],
    ['PATCH', '/v1/agents/123/status'], ['GET', '/v1/agents/123/calls'], ['POST', '/v1/agents/123/verify-provider'],
    ['GET', '/v1/model-configs/zzz'], ['PUT', '/v1/model-configs/zzz'], ['DELETE', '/v1/model-configs/zzz'],
    ['GET', '/v1/assets/zzz'], ['GET', '/v1/assets/zzz/download'], ['DELETE', '/v1/assets/zzz'],
    ['GET', '/v1/assets/generate/jobs/zzz'], ['GET', '/v1/public/assets/zzz'], ['GET', '/v1/public/model-configs/zzz'],
    ['GET', '/v1/public/agents/zzz'], ['GET', "/v1/agents/'%20OR%201=1"],
  ];
  for (const [method, path] of routes) {
    const res = await s.call(method, path, { body: method === 'GET' || method === 'DELETE' ? undefined : {} });
    t.is(res.status, 400, `${method} ${path}`);
    t.true(isErrorBody(res.body), `${method} ${path}`);
  }
});

test('query parameters of the wrong type or unknown are 400', async (t) => {
  for (const q of ['limit=abc', 'limit=1.5', 'offset=-1', 'bogus=1', 'limit=1&limit=2', 'offset=2147483648', 'offset=1e30']) {
    const res = await s.call('GET', `/v1/agents?${q}`);
    t.is(res.status, 400, q);
    t.true(isErrorBody(res.body));
  }
});

test('every list endpoint takes limit 1..100 and offset >= 0, and refuses one past each bound', async (t) => {
  const agent = (await s.call('POST', '/v1/agents', { body: { title: 'for calls' } })).body;
  const lists = ['/v1/agents', '/v1/model-configs', '/v1/model-variants', '/v1/assets', `/v1/agents/${agent.agent_id}/calls`];
  for (const path of lists) {
    for (const q of ['limit=1', 'limit=100', 'offset=0']) {
      const res = await s.call('GET', `${path}?${q}`);
      t.is(res.status, 200, `${path}?${q}`);
      if (q.startsWith('limit')) t.is(res.body.pagination.limit, Number(q.slice(6)));
    }
    t.is((await s.call('GET', path)).body.pagination.limit, 20, `${path} default limit`);
    t.is((await s.call('GET', path)).body.pagination.offset, 0, `${path} default offset`);
    for (const q of ['limit=0', 'limit=101', 'offset=-1']) {
      const res = await s.call('GET', `${path}?${q}`);
      t.is(res.status, 400, `${path}?${q}`);
      t.is(res.body.code, 'validation_failed');
    }
  }
});

test('the largest offset is accepted', async (t) => {
  const res = await s.call('GET', '/v1/agents?offset=2147483647');
  t.is(res.status, 200);
  t.deepEqual(res.body.data, []);
});

test('unknown routes are 404 route_not_found and wrong methods 405 with Allow', async (t) => {
  const missing = await s.call('GET', '/v1/nothing-here');
  t.is(missing.status, 404);
  t.is(missing.body.code, 'route_not_found');
  const wrong = await s.call('PUT', '/v1/agents');
  t.is(wrong.status, 405);
  t.is(wrong.body.code, 'method_not_allowed');
  t.regex(wrong.headers.get('allow') ?? '', /GET/);
});

test('responses default to Cache-Control private, no-store, errors included', async (t) => {
  t.is((await s.call('GET', '/v1/agents')).headers.get('cache-control'), 'private, no-store');
  t.is((await s.call('GET', '/v1/agents', { key: null })).headers.get('cache-control'), 'private, no-store');
  t.is((await s.call('GET', '/v1/agents/providers')).headers.get('cache-control'), 'private, no-store');
});

test('deliberately cacheable endpoints state their own Cache-Control', async (t) => {
  t.is((await s.call('GET', '/v1/openapi.json', { key: null })).headers.get('cache-control'), 'public, max-age=300');
  t.is((await s.call('GET', '/v1/public/model-variants/svc%2Ftest-portrait%2Fv1', { key: null })).headers.get('cache-control'), 'public, max-age=300');
});

test('public paths answer CORS preflights and carry Access-Control-Allow-Origin: *', async (t) => {
  const pre = await s.call('OPTIONS', '/v1/public/assets/00000000-0000-4000-8000-0000000000a1', {
    key: null, headers: { origin: 'https://site.example', 'access-control-request-method': 'GET', 'access-control-request-headers': 'content-type' },
  });
  t.is(pre.status, 204);
  t.is(pre.headers.get('access-control-allow-origin'), '*');
  t.regex(pre.headers.get('access-control-allow-methods') ?? '', /GET/);
  const get = await s.call('GET', '/v1/public/assets/00000000-0000-4000-8000-0000000000a1', { key: null, headers: { origin: 'https://site.example' } });
  t.is(get.status, 200);
  t.is(get.headers.get('access-control-allow-origin'), '*');
  const priv = await s.call('GET', '/v1/agents', { headers: { origin: 'https://site.example' } });
  t.is(priv.headers.get('access-control-allow-origin'), null);
});

test('the OpenAPI document is v1.0.0 with server {base_url}/v1 and lists every route', async (t) => {
  const res = await s.call('GET', '/v1/openapi.json', { key: null });
  t.is(res.status, 200);
  t.is(res.body.openapi, '3.1.0');
  t.is(res.body.info.version, 'v1.0.0');
  t.deepEqual(res.body.servers, [{ url: `${s.url}/v1` }]);
  const ops = Object.entries<any>(res.body.paths).flatMap(([p, m]) => Object.keys(m).map((k) => `${k.toUpperCase()} ${p}`));
  for (const expected of [
    'GET /model-configs', 'POST /model-configs', 'GET /model-configs/{model_config_id}', 'PUT /model-configs/{model_config_id}', 'DELETE /model-configs/{model_config_id}',
    'GET /model-variants', 'GET /model-variants/{model_variant_id}',
    'POST /assets/initiate-upload', 'POST /assets/sign-part', 'POST /assets', 'GET /assets', 'GET /assets/{asset_id}', 'GET /assets/{asset_id}/download', 'DELETE /assets/{asset_id}',
    'POST /assets/generate/{generator}', 'GET /assets/generate/jobs/{job_id}',
    'GET /agents', 'POST /agents', 'GET /agents/{agent_id}', 'PATCH /agents/{agent_id}', 'DELETE /agents/{agent_id}', 'PATCH /agents/{agent_id}/status',
    'GET /agents/{agent_id}/calls', 'GET /agents/providers', 'POST /agents/{agent_id}/verify-provider',
    'GET /public/model-configs/{model_config_id}', 'GET /public/assets/{asset_id}', 'GET /public/model-variants/{model_variant_id}', 'GET /public/agents/{agent_id}',
  ]) t.true(ops.includes(expected), expected);
  const operationIds = Object.values<any>(res.body.paths).flatMap((m) => Object.values<any>(m).map((op) => op.operationId));
  t.is(new Set(operationIds).size, operationIds.length, 'operationIds are unique');
  for (const [path, methods] of Object.entries<any>(res.body.paths)) {
    for (const op of Object.values<any>(methods)) {
      const declared = (op.parameters ?? []).filter((p: any) => p.in === 'path').map((p: any) => p.name).sort();
      t.deepEqual(declared, [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort(), `${path} path parameters`);
      t.true(Object.keys(op.responses).length > 0);
    }
  }
  const createAgent = res.body.paths['/agents'].post;
  t.is(createAgent.requestBody.content['application/json'].schema.properties.title.maxLength, 255);
  t.deepEqual(createAgent.security, [{ ApiKey: [] }]);
});

test('every documented operation is served, and every served route is documented', async (t) => {
  const doc = (await s.call('GET', '/v1/openapi.json', { key: null })).body;
  const sample: Record<string, string> = { model_variant_id: 'svc%2Ftest-portrait%2Fv1', generator: 'idle-v1', n: '1', key: 'a2V5' };
  for (const [path, methods] of Object.entries<any>(doc.paths)) {
    for (const method of Object.keys(methods)) {
      const concrete = `/v1${path.replace(/\{(\w+)\}/g, (_, name: string) => sample[name] ?? '00000000-0000-4000-8000-00000000ffff')}`;
      const res = await s.call(method.toUpperCase(), concrete, { body: ['post', 'put', 'patch'].includes(method) ? {} : undefined });
      t.not(res.body?.code, 'route_not_found', `${method} ${concrete}`);
      t.not(res.status, 405, `${method} ${concrete}`);
      t.true(res.status < 500, `${method} ${concrete}: ${res.status}`);
    }
  }
  const documented = new Set(Object.entries<any>(doc.paths).flatMap(([p, m]) => Object.keys(m).map((k) => `${k} ${p}`)));
  const aliases = new Set(s.server.api.specs.flatMap((spec) => (spec.aliasPaths ?? []).map((a) => `${spec.method} ${a}`)));
  t.true(s.server.router.stack.length > 20, "the router has the API routes");
  for (const layer of s.server.router.stack) {
    const path = String(layer.path).replace(/^\/v1/, '');
    for (const method of layer.methods.map((m) => m.toLowerCase()).filter((m) => m !== 'head')) {
      if (aliases.has(`${method} ${path}`)) continue;
      t.true(documented.has(`${method} ${path.replace(/:(\w+)/g, '{$1}')}`), `${method} ${layer.path} is in the OpenAPI document`);
    }
  }
});

test('the reference page renders the document as HTML', async (t) => {
  const res = await s.call('GET', '/v1/docs', { key: null });
  t.is(res.status, 200);
  t.regex(res.headers.get('content-type') ?? '', /text\/html/);
  t.true(res.text.includes('v1.0.0'));
  t.true(res.text.includes('/v1/agents/{agent_id}/verify-provider'));
});

test('NUL characters, bad percent-encoding and odd keys are 400s, never 500s', async (t) => {
  const cases: Array<[string, string, string | undefined]> = [
    ['POST', '/v1/agents', '{"title":"a\\u0000b"}'],
    ['POST', '/v1/agents', '{"title":"ok","provider_config":{"k\\u0000":"v"}}'],
    ['POST', '/v1/model-configs', '{"title":"x","model_variant_id":"svc/test-portrait/v1","model_configurations":{"a":"\\u0000"}}'],
    ['GET', '/v1/assets?name=%00', undefined],
    ['GET', '/v1/agents/%E0%A4%A', undefined],
    ['GET', '/v1/agents?limit=%E0%A4%A', undefined],
    ['GET', '/v1/model-variants/%E0%A4%A', undefined],
    ['POST', '/v1/agents', '{"title":"a","__proto__":{"polluted":true}}'],
    ['POST', '/v1/agents', '\u0000\u0001'],
  ];
  for (const [method, path, raw] of cases) {
    const res = await s.call(method, path, { raw, headers: raw ? { 'content-type': 'application/json' } : {} });
    t.is(res.status, 400, `${method} ${path} ${raw ?? ''}`);
    t.true(isErrorBody(res.body));
  }
  t.is(({} as Record<string, unknown>).polluted, undefined);
});

test('without a configured public base URL, signed URLs and the OpenAPI server use the address the client called; forwarded headers are ignored unless a proxy is trusted', async (t) => {
  const forwarded = { 'x-forwarded-host': 'avatars.example.test', 'x-forwarded-proto': 'https' };
  const direct = await s.call('GET', '/v1/assets?source=template', { headers: forwarded });
  t.true(direct.body.data[0].asset_url.startsWith(`${s.url}/v1/storage/`), 'X-Forwarded-* from anyone is not trusted by default');
  t.is((await fetch(direct.body.data[0].asset_url)).status, 200);
  const doc = await s.call('GET', '/v1/openapi.json', { key: null, headers: forwarded });
  t.deepEqual(doc.body.servers, [{ url: `${s.url}/v1` }]);

  const proxied = await startTestServer({ label: 'http_proxy', config: { trustProxy: true } });
  try {
    const viaProxy = await proxied.call('GET', '/v1/assets?source=template', { headers: forwarded });
    t.true(viaProxy.body.data[0].asset_url.startsWith('https://avatars.example.test/v1/storage/objects/'));
    const proxiedDoc = await proxied.call('GET', '/v1/openapi.json', { key: null, headers: forwarded });
    t.deepEqual(proxiedDoc.body.servers, [{ url: 'https://avatars.example.test/v1' }]);
  } finally {
    await proxied.stop();
  }
});

test('deeply nested JSON is refused with 400 (64 levels at most), moderate nesting is fine', async (t) => {
  const bomb = '['.repeat(200_000) + ']'.repeat(200_000);
  for (const raw of [bomb, `{"title":"a","provider_config":{"x":${bomb}}}`]) {
    const res = await s.call('POST', '/v1/agents', { raw, headers: { 'content-type': 'application/json' } });
    t.is(res.status, 400);
    t.regex(res.body.message, /nested deeper than 64/);
  }
  const nest = (depth: number): unknown => (depth === 0 ? 'leaf' : { n: nest(depth - 1) });
  // Containers may sit at depths 0..63: the body is 0, provider_config 1, its deepest object 63.
  t.is((await s.call('POST', '/v1/agents', { body: { title: 'ok', provider_config: nest(63) } })).status, 201);
  t.is((await s.call('POST', '/v1/agents', { body: { title: 'deep', provider_config: nest(64) } })).status, 400);
});
