import test from 'ava';
import { until } from '../../testing/until.ts';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { Registry } from '../../core/registry.ts';
import { createServer, type AppServer } from '../../server/build-server.ts';
import { createTestDatabase, isErrorBody, SECRETS, testFacePlugin } from './harness.ts';
import { firstResponse, rawExchange } from './security-helpers.ts';

// Issue 17 items 8 and 9, and the whole-API rule of issue 10 (JSON bodies only, 415 otherwise).

let server: AppServer;
let url: string;
let key: string;
let dataDir: string;
let dropDb: () => Promise<void>;
const logLines: any[] = [];

test.before(async () => {
  const db = await createTestDatabase('sec_http');
  dropDb = db.drop;
  dataDir = mkdtempSync(join(tmpdir(), 'svc-sec-http-'));
  const sink = new Writable({ write(chunk, _e, done) { logLines.push(JSON.parse(String(chunk))); done(); } });
  server = await createServer({ ...SECRETS, port: 0, host: '127.0.0.1', databaseUrl: db.url, dataDir }, { registry: new Registry().use(testFacePlugin), logger: pino({ level: 'info' }, sink) });
  // Routes another module would add: one through ApiRoutes with the beacon policy and its own
  // error shape, one directly on the router (an embedder's, left to itself).
  server.api.add(server.router, {
    method: 'post', path: '/test-beacon/:room', operationId: 'testBeacon', summary: 'test', tag: 'test', auth: 'public', acceptsBody: 'beacon',
    errorBody: (e) => ({ body: { error_code: e.code, message: e.message } }),
    responses: { 200: { description: 'ok' } },
  }, async ({ body }) => ({ status: 200, body: { received: body ?? null } }));
  server.router.post('/test-direct-own', (ctx) => {
    ctx.body = { ok: true };
  });
  ({ url } = await server.listen());
  ({ key } = await server.services.apiKeys.create('org-sec-http', 'test'));
});
test.after.always(async () => {
  await server?.close();
  await dropDb?.();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

const post = async (path: string, body: BodyInit | undefined, headers: Record<string, string> = {}) => {
  const res = await fetch(`${url}${path}`, { method: 'POST', headers: { 'x-api-key': key, ...headers }, body });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, body: text ? JSON.parse(text) : undefined };
};

// ---- 415: JSON bodies only ----

test('a JSON endpoint refuses a body that is not typed JSON with 415 unsupported_media_type (text/plain and no type included)', async (t) => {
  const json = JSON.stringify({ title: 'media type' });
  const variants: Array<Record<string, string>> = [{ 'content-type': 'text/plain' }, { 'content-type': 'text/plain;charset=UTF-8' }, {}, { 'content-type': 'application/x-www-form-urlencoded' }, { 'content-type': 'application/jsonx' }];
  for (const headers of variants) {
    const res = await post('/v1/agents', new TextEncoder().encode(json), headers);
    t.is(res.status, 415, JSON.stringify(headers));
    t.is(res.body.code, 'unsupported_media_type');
    t.true(isErrorBody(res.body));
  }
  for (const type of ['application/json', 'application/json; charset=utf-8', 'application/merge-patch+json']) {
    t.is((await post('/v1/agents', json, { 'content-type': type })).status, 201, type);
  }
});

test('an empty body needs no media type', async (t) => {
  const created = await post('/v1/agents', JSON.stringify({ title: 'empty body' }), { 'content-type': 'application/json' });
  const res = await fetch(`${url}/v1/agents/${created.body.agent_id}/verify-provider`, { method: 'POST', headers: { 'x-api-key': key, 'content-type': 'text/plain', 'content-length': '0' } });
  t.not(res.status, 415);
});

test('a route can accept beacon bodies (text/plain) and answer refusals in its own error shape', async (t) => {
  const beacon = await post('/v1/test-beacon/room-1', JSON.stringify({ reason: 'pagehide' }), { 'content-type': 'text/plain;charset=UTF-8' });
  t.is(beacon.status, 200);
  t.deepEqual(beacon.body.received, { reason: 'pagehide' });
  t.deepEqual((await post('/v1/test-beacon/room-1', undefined)).body.received, null, 'no body at all');
  const form = await post('/v1/test-beacon/room-1', 'a=b', { 'content-type': 'application/x-www-form-urlencoded' });
  t.is(form.status, 415);
  t.deepEqual(Object.keys(form.body).sort(), ['error_code', 'message']);
  t.is(form.body.error_code, 'unsupported_media_type');
});

test('a route mounted directly on the router (not through ApiRoutes) reads its own body: nothing is checked for it', async (t) => {
  t.is((await post('/v1/test-direct-own', 'anything', { 'content-type': 'text/plain' })).status, 200);
});

// ---- item 9: malformed HTTP answered in the error shape ----

test('headers too large: 431 headers_too_large in the error shape, socket closed', async (t) => {
  const res = await rawExchange(url, `GET /v1/agents HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(40_000)}\r\n\r\n`);
  t.true(res.closed);
  const answer = firstResponse(res.text);
  t.is(answer.status, 431);
  t.is(answer.body.code, 'headers_too_large');
  t.true(isErrorBody(answer.body));
});

test('a bad request line and bad chunking: 400 bad_request in the error shape, socket closed', async (t) => {
  for (const payload of [
    'NOT AN HTTP REQUEST\r\n\r\n',
    `POST /v1/agents HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`,
  ]) {
    const res = await rawExchange(url, payload);
    t.true(res.closed, payload.slice(0, 20));
    const answer = firstResponse(res.text);
    t.is(answer.status, 400, payload.slice(0, 20));
    t.is(answer.body.code, 'bad_request');
    t.true(isErrorBody(answer.body));
  }
});

test('a client that disconnects mid-body is logged as a client abort (499, info), never as a 500', async (t) => {
  const { port } = new URL(url);
  const path = `/v1/agents/${randomUUID()}`;
  await new Promise<void>((resolve) => {
    const socket = net.connect(Number(port), '127.0.0.1', () => {
      socket.write(`PATCH ${path} HTTP/1.1\r\nHost: x\r\nX-API-Key: ${key}\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{"title": "cut`, () => setTimeout(() => socket.destroy(), 100));
    });
    socket.on('error', () => undefined);
    socket.on('close', () => resolve());
  });
  const entry: any = await until(() => logLines.find((l) => l.msg === 'request' && l.path === path), { timeoutMs: 5000, intervalMs: 50, what: 'the request to be logged' });
  t.truthy(entry, 'the request is logged');
  t.is(entry.status, 499);
  t.is(entry.level, 30, 'info');
  t.false(logLines.some((l) => l.level >= 50), 'no error logged');
});

// ---- item 9: content_type is a MIME type ----

test('content_type must be a MIME type: CRLF, spaces and junk are refused with 400', async (t) => {
  for (const content_type of ['image/png\r\nX-Injected: 1', 'image/png\n', 'text/html junk', 'image/', '/png', 'image/png;', 'a/b;c']) {
    const res = await post('/v1/assets/initiate-upload', JSON.stringify({ name: 'x', category: 'image', content_type }), { 'content-type': 'application/json' });
    t.is(res.status, 400, JSON.stringify(content_type));
    t.is(res.body.code, 'validation_failed');
  }
  for (const content_type of ['image/png', 'video/mp4; codecs="avc1.42E01E"', 'application/vnd.api+json', 'text/plain;charset=utf-8']) {
    t.is((await post('/v1/assets/initiate-upload', JSON.stringify({ name: 'x', category: 'image', content_type }), { 'content-type': 'application/json' })).status, 200, content_type);
  }
});

// ---- item 8: stored objects cannot run on the API origin ----

async function storeAsset(contentType: string, bytes: Buffer): Promise<any> {
  const init = await post('/v1/assets/initiate-upload', JSON.stringify({ name: 'f', category: 'misc', content_type: contentType, size_bytes: bytes.length }), { 'content-type': 'application/json' });
  const signed = await post('/v1/assets/sign-part', JSON.stringify({ asset_id: init.body.asset_id, upload_id: init.body.upload_id, part_number: 1 }), { 'content-type': 'application/json' });
  const put = await fetch(signed.body.upload_url, { method: 'PUT', body: new Uint8Array(bytes) });
  const done = await post('/v1/assets', JSON.stringify({
    asset_id: init.body.asset_id, upload_id: init.body.upload_id, name: 'f', category: 'misc', content_type: contentType, size_bytes: bytes.length,
    parts: [{ part_number: 1, etag: put.headers.get('etag') }],
  }), { 'content-type': 'application/json' });
  if (done.status !== 201) throw new Error(done.text);
  return done.body;
}

test('downloads carry nosniff and a sandboxing CSP; active types are attachments, media inline', async (t) => {
  const cases: Array<[string, boolean]> = [
    ['text/html', false], ['image/svg+xml', false], ['application/xml', false], ['application/pdf', false], ['text/plain', false],
    ['image/png', true], ['video/mp4', true], ['audio/mpeg', true], ['application/octet-stream', true],
  ];
  for (const [type, inline] of cases) {
    const asset = await storeAsset(type, Buffer.from('<html><script>alert(1)</script></html>'));
    const res = await fetch(asset.asset_url);
    t.is(res.status, 200, type);
    t.is(res.headers.get('x-content-type-options'), 'nosniff', type);
    t.is(res.headers.get('content-security-policy'), "default-src 'none'; sandbox", type);
    t.is(res.headers.get('content-disposition'), inline ? null : 'attachment', type);
    await res.arrayBuffer();
  }
  const asset = await storeAsset('video/mp4', randomBytes(100));
  const range = await fetch(asset.asset_url, { headers: { range: 'bytes=0-9' } });
  t.is(range.status, 206);
  t.is(range.headers.get('x-content-type-options'), 'nosniff');
  await range.arrayBuffer();
});

test('an invalid content type stored before validation existed downloads as bytes, never a 500', async (t) => {
  const asset = await storeAsset('text/html', Buffer.from('<b>x</b>'));
  await server.db('assets').where('asset_id', asset.asset_id).update({ content_type: 'text/html\r\nX-Injected: 1' });
  const fresh = await fetch(`${url}/v1/assets/${asset.asset_id}`, { headers: { 'x-api-key': key } });
  t.is(fresh.status, 200);
  const download = await fetch(((await fresh.json()) as any).asset_url);
  t.is(download.status, 200);
  t.is(download.headers.get('content-type'), 'application/octet-stream');
  t.is(download.headers.get('x-injected'), null);
  t.is(await download.text(), '<b>x</b>');
});
