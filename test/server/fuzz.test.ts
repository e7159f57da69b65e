import test from 'ava';
import { isErrorBody, startTestServer, type TestServer } from './harness.ts';

/** Deterministic PRNG (mulberry32), so a failure reproduces with its seed. */
function rng(seed: number) {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const STRINGS = ['', 'a', 'x'.repeat(300), '💥', '\ud800', '../../etc/passwd', "' OR 1=1 --", '%00', 'svc/human-portrait/v1', 'https://example.com', '00000000-0000-4000-8000-000000000000', 'null', '-1', '1e309'];
const NUMBERS = [0, -1, 1, 1.5, 2 ** 31, 2 ** 53, -(2 ** 63), 1e308, 10001, 86401];

function value(r: () => number, depth = 0): unknown {
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(r() * xs.length)]!;
  switch (Math.floor(r() * (depth > 3 ? 5 : 7))) {
    case 0: return pick(STRINGS);
    case 1: return pick(NUMBERS);
    case 2: return r() < 0.5;
    case 3: return null;
    case 4: return pick(STRINGS);
    case 5: return Array.from({ length: Math.floor(r() * 4) }, () => value(r, depth + 1));
    default: {
      const keys = ['title', 'mode', 'tools', 'function', 'name', 'delivery', 'url', 'parts', 'part_number', 'etag', 'asset_id', 'upload_id', 'status', 'model_configurations', 'behaviour', 'size_bytes', 'category', pick(STRINGS)];
      return Object.fromEntries(Array.from({ length: Math.floor(r() * 5) }, () => [pick(keys), value(r, depth + 1)]));
    }
  }
}

/** Lone surrogates cannot be percent-encoded; the client side replaces them. */
const wellFormed = (text: string) => text.replace(/[\ud800-\udfff]/g, '\ufffd');

let s: TestServer;
test.before(async () => {
  s = await startTestServer({ label: 'fuzz' });
});
test.after.always(async () => {
  await s?.stop();
});

/**
 * The fuzz runs with the default per-key rate limit (docs/decisions-rest.md): it calls as fast as
 * one client can, so it is limited like any client. A 429 is the limiter's answer, not the route's:
 * the request waits the Retry-After it was given and is sent again, so every fuzzed request reaches
 * its handler.
 */
async function callPolitely(method: string, path: string, body: string | undefined) {
  for (;;) {
    const res = await s.call(method, path, { raw: body, headers: body ? { 'content-type': 'application/json' } : {} });
    if (res.status !== 429) return res;
    const retryAfter = Number(res.headers.get('retry-after'));
    if (!(retryAfter >= 0)) return res; // a 429 without Retry-After is reported as it is
    await new Promise((resolve) => setTimeout(resolve, Math.max(retryAfter * 1000, 50)));
  }
}

test('random bodies, ids and queries on every documented route never produce a 5xx', async (t) => {
  const doc = (await s.call('GET', '/v1/openapi.json', { key: null })).body;
  const agent = (await s.call('POST', '/v1/agents', { body: { title: 'fuzz target' } })).body;
  const ids = [agent.agent_id, '00000000-0000-4000-8000-0000000000a1', 'not-a-uuid', '%F0%9F%92%A5', '0'.repeat(5000), 'svc%2Ftest-portrait%2Fv1'];
  const r = rng(20261122);
  let requests = 0;
  for (const [path, methods] of Object.entries<any>(doc.paths)) {
    for (const method of Object.keys(methods)) {
      for (let i = 0; i < 12; i++) {
        const concrete = path.replace(/\{(\w+)\}/g, () => ids[Math.floor(r() * ids.length)]!);
        const query = r() < 0.5 ? `?limit=${encodeURIComponent(wellFormed(String(value(r))))}&offset=${encodeURIComponent(wellFormed(String(value(r))))}` : '';
        const body = method === 'get' || method === 'delete' ? undefined : JSON.stringify(value(r));
        const res = await callPolitely(method.toUpperCase(), `/v1${concrete}${query}`, body);
        requests++;
        t.true(res.status < 500, `${method.toUpperCase()} ${concrete}${query} ${body?.slice(0, 200)} -> ${res.status} ${res.text.slice(0, 200)}`);
        if (res.status >= 400) t.true(isErrorBody(res.body), `${method} ${concrete}: ${res.text.slice(0, 200)}`);
      }
    }
  }
  t.true(requests > 300);
  t.is((await callPolitely('GET', '/v1/agents', undefined)).status, 200, 'the server still serves');
});
