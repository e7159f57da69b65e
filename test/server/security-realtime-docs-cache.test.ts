/**
 * Issue 17 item 7: the publicly cacheable `/v1/openapi.json` and `/v1/docs` must not take their
 * base URL from `X-Forwarded-*` headers anyone can send, unless the operator declared a proxy in
 * front (`trustProxy`, SVC_TRUST_PROXY=1); and they name in `Vary` the request headers they depend on.
 */
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { loadConfigFromEnv } from '../../server/config/env.ts';
import { startTestServer } from './harness.ts';

const forged = { 'x-forwarded-host': 'evil.example', 'x-forwarded-proto': 'https' };

// Serial: each test boots its own embedded database; three at once on a loaded 2-core machine
// overran PGlite's connection acquire timeout during migration.

test.serial('without a declared proxy, forged X-Forwarded-* headers do not reach the cached documents', async (t) => {
  const ts = await startTestServer({ label: 'docs_cache_direct', pglite: true });
  t.teardown(() => ts.stop());
  const doc = await ts.call('GET', '/v1/openapi.json', { key: null, headers: forged });
  t.is(doc.status, 200);
  t.deepEqual(doc.body.servers, [{ url: `${ts.url}/v1` }]);
  t.regex(doc.headers.get('cache-control') ?? '', /public/);
  t.regex(doc.headers.get('vary') ?? '', /\bHost\b/);
  const html = await ts.call('GET', '/v1/docs', { key: null, headers: forged });
  t.false(html.text.includes('evil.example'));
  t.regex(html.headers.get('vary') ?? '', /\bHost\b/);
  // The signed URLs the API hands out do not follow forged headers either.
  const assets = await ts.call('GET', '/v1/assets?source=template', { headers: forged });
  t.true(assets.body.data[0].asset_url.startsWith(`${ts.url}/v1/storage/`));
});

test.serial('behind a declared proxy the forwarded address is used and Vary names the forwarded headers', async (t) => {
  const ts = await startTestServer({ label: 'docs_cache_proxy', pglite: true, config: { trustProxy: true } });
  t.teardown(() => ts.stop());
  const doc = await ts.call('GET', '/v1/openapi.json', { key: null, headers: { 'x-forwarded-host': 'avatars.example.test', 'x-forwarded-proto': 'https' } });
  t.deepEqual(doc.body.servers, [{ url: 'https://avatars.example.test/v1' }]);
  const vary = doc.headers.get('vary') ?? '';
  t.regex(vary, /X-Forwarded-Host/);
  t.regex(vary, /X-Forwarded-Proto/);
});

test.serial('PUBLIC_BASE_URL wins over every request header', async (t) => {
  const ts = await startTestServer({ label: 'docs_cache_public', pglite: true, config: { trustProxy: true, publicBaseUrl: 'https://api.example.org' } });
  t.teardown(() => ts.stop());
  const { port } = ts.server.httpServer.address() as AddressInfo; // ts.url is the public base URL here
  const res = await fetch(`http://127.0.0.1:${port}/v1/openapi.json`, { headers: forged });
  t.deepEqual(((await res.json()) as { servers: unknown }).servers, [{ url: 'https://api.example.org/v1' }]);
});

test('SVC_TRUST_PROXY is off unless set to 1/true/yes', (t) => {
  const dir = '/tmp/svc-docs-cache-env';
  const base = { SVC_DATA_DIR: dir, SVC_ENCRYPTION_KEY: 'k', SVC_SIGNING_SECRET: 's' };
  t.false(loadConfigFromEnv(base).trustProxy);
  t.false(loadConfigFromEnv({ ...base, SVC_TRUST_PROXY: '0' }).trustProxy);
  t.true(loadConfigFromEnv({ ...base, SVC_TRUST_PROXY: '1' }).trustProxy);
  t.true(loadConfigFromEnv({ ...base, SVC_TRUST_PROXY: 'true' }).trustProxy);
});
