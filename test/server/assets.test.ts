import test from 'ava';
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { readdirSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import type { Plugin } from '../../core/registry.ts';
import { isErrorBody, startTestServer, type TestServer } from './harness.ts';

const MB = 1024 * 1024;
const hookCalls: string[] = [];

/** A real asset hook (the face plugin's landmark hook uses the same contract): hashes the image. */
const testHookPlugin: Plugin = {
  name: 'test-asset-hook',
  register(registry) {
    registry.register('asset-hook', 'digest', () => ({
      async onImageAssetFinalized(asset: { asset_id: string; read(): Promise<Buffer> }) {
        hookCalls.push(asset.asset_id);
        const bytes = await asset.read();
        return { sha256: createHash('sha256').update(bytes).digest('hex'), size: bytes.length };
      },
    }));
  },
};

let s: TestServer;
test.before(async () => {
  s = await startTestServer({ label: 'assets', plugins: [testHookPlugin] });
});
test.after.always(async () => {
  await s?.stop();
});

interface Uploaded {
  init: any;
  etags: string[];
}

async function uploadParts(parts: Buffer[], meta: { name?: string; category?: string; content_type?: string | null } = {}, key?: string): Promise<Uploaded> {
  const total = parts.reduce((n, p) => n + p.length, 0);
  const init = await s.call('POST', '/v1/assets/initiate-upload', {
    key, body: { name: meta.name ?? 'file.bin', category: meta.category ?? 'weight', content_type: meta.content_type ?? 'application/octet-stream', size_bytes: total },
  });
  if (init.status !== 200) throw new Error(init.text);
  const etags: string[] = [];
  for (const [i, part] of parts.entries()) {
    const signed = await s.call('POST', '/v1/assets/sign-part', { key, body: { asset_id: init.body.asset_id, upload_id: init.body.upload_id, part_number: i + 1 } });
    const put = await fetch(signed.body.upload_url, { method: 'PUT', body: new Uint8Array(part) });
    if (put.status !== 200) throw new Error(`part ${i + 1}: ${put.status} ${await put.text()}`);
    etags.push(put.headers.get('etag')!);
  }
  return { init: init.body, etags };
}

const finalize = (u: Uploaded, overrides: Record<string, unknown> = {}, key?: string) =>
  s.call('POST', '/v1/assets', {
    key,
    body: {
      asset_id: u.init.asset_id, upload_id: u.init.upload_id, name: 'file.bin', category: 'weight', content_type: 'application/octet-stream',
      size_bytes: overrides.size_bytes ?? 0, parts: u.etags.map((etag, i) => ({ part_number: i + 1, etag })), ...overrides,
    },
  });

test('a 12 MB file uploaded in 3 parts downloads byte-exact', async (t) => {
  const file = randomBytes(12 * MB);
  const parts = [file.subarray(0, 5 * MB), file.subarray(5 * MB, 10 * MB), file.subarray(10 * MB)];
  const u = await uploadParts(parts);
  t.regex(u.init.s3_key, new RegExp(u.init.asset_id));
  t.true(u.etags.every((e) => /^"[0-9a-f]{32}"$/.test(e)));
  const res = await finalize(u, { size_bytes: file.length });
  t.is(res.status, 201, res.text);
  t.is(res.body.asset_id, u.init.asset_id);
  t.is(res.body.size_bytes, 12 * MB);
  t.regex(res.body.etag, /-3"$/);
  t.regex(res.body.created_by, /^api_key:/);
  const download = await fetch(res.body.asset_url);
  t.is(download.status, 200);
  t.is(download.headers.get('content-type'), 'application/octet-stream');
  const bytes = Buffer.from(await download.arrayBuffer());
  t.is(bytes.length, file.length);
  t.true(bytes.equals(file));
  const viaDownload = await s.call('GET', `/v1/assets/${u.init.asset_id}/download`);
  t.is(viaDownload.status, 200);
  t.true(Buffer.from(await (await fetch(viaDownload.body.asset_url)).arrayBuffer()).equals(file));
});

test('every part but the last must be at least 5 MiB (409), the last may be small', async (t) => {
  const small = await uploadParts([randomBytes(5 * MB - 1), randomBytes(10)]);
  const res = await finalize(small, { size_bytes: 5 * MB + 9 });
  t.is(res.status, 409);
  t.is(res.body.code, 'upload_conflict');
  t.is(res.body.details.reason, 'part_too_small');
  const exact = await uploadParts([randomBytes(5 * MB), randomBytes(1)]);
  t.is((await finalize(exact, { size_bytes: 5 * MB + 1 })).status, 201);
  const single = await uploadParts([randomBytes(100)]);
  t.is((await finalize(single, { size_bytes: 100 })).status, 201);
});

test('a wrong ETag, a missing part or a wrong size is a 409 on finalize', async (t) => {
  const u = await uploadParts([randomBytes(1000)]);
  const badEtag = await finalize(u, { size_bytes: 1000, parts: [{ part_number: 1, etag: '"0123456789abcdef0123456789abcdef"' }] });
  t.is(badEtag.status, 409);
  t.is(badEtag.body.details.reason, 'etag_mismatch');
  const big = await uploadParts([randomBytes(5 * MB)]);
  const missing = await s.call('POST', '/v1/assets', {
    body: {
      asset_id: big.init.asset_id, upload_id: big.init.upload_id, name: 'file.bin', category: 'weight', content_type: 'application/octet-stream',
      size_bytes: 5 * MB, parts: [{ part_number: 1, etag: big.etags[0] }, { part_number: 2, etag: big.etags[0] }],
    },
  });
  t.is(missing.status, 409);
  t.is(missing.body.details.reason, 'part_missing');
  const wrongSize = await finalize(u, { size_bytes: 999 });
  t.is(wrongSize.status, 409);
  t.is(wrongSize.body.details.reason, 'initiation_mismatch');
  const ok = await finalize(u, { size_bytes: 1000, parts: [{ part_number: 1, etag: u.etags[0]!.replaceAll('"', '') }] });
  t.is(ok.status, 201, 'ETags are accepted with or without quotes');
  const again = await finalize(u, { size_bytes: 1000 });
  t.is(again.status, 404, 'a finalized upload session is gone');
  t.is(again.body.code, 'upload_not_found');
});

test('downloads honour single byte ranges (206) and refuse unsatisfiable ones (416)', async (t) => {
  const bytes = randomBytes(1000);
  const u = await uploadParts([bytes]);
  const asset = (await finalize(u, { size_bytes: 1000 })).body;
  const part = await fetch(asset.asset_url, { headers: { range: 'bytes=100-199' } });
  t.is(part.status, 206);
  t.is(part.headers.get('content-range'), 'bytes 100-199/1000');
  t.true(Buffer.from(await part.arrayBuffer()).equals(bytes.subarray(100, 200)));
  const tail = await fetch(asset.asset_url, { headers: { range: 'bytes=-10' } });
  t.true(Buffer.from(await tail.arrayBuffer()).equals(bytes.subarray(990)));
  const open = await fetch(asset.asset_url, { headers: { range: 'bytes=995-' } });
  t.is(open.headers.get('content-range'), 'bytes 995-999/1000');
  const beyond = await fetch(asset.asset_url, { headers: { range: 'bytes=1000-1001' } });
  t.is(beyond.status, 416);
  t.is(beyond.headers.get('content-range'), 'bytes */1000');
  const multi = await fetch(asset.asset_url, { headers: { range: 'bytes=0-1,5-6' } });
  t.is(multi.status, 200);
  t.is((await multi.arrayBuffer()).byteLength, 1000);
});

test('a part upload cut off mid-stream leaves nothing behind and the part can be sent again', async (t) => {
  const { body: init } = await s.call('POST', '/v1/assets/initiate-upload', { body: { name: 'cut.bin', category: 'weight' } });
  const signed = (await s.call('POST', '/v1/assets/sign-part', { body: { ...init, part_number: 1 } })).body;
  const url = new URL(signed.upload_url);
  await new Promise<void>((resolve) => {
    const req = http.request({ host: url.hostname, port: url.port, method: 'PUT', path: url.pathname + url.search, headers: { 'content-length': 100_000 } });
    req.on('error', () => resolve());
    req.write(randomBytes(30_000), () => setTimeout(() => { req.destroy(); resolve(); }, 50));
  });
  t.is((await s.call('GET', '/v1/agents')).status, 200, 'the server keeps serving');
  const bytes = randomBytes(500);
  const put = await fetch(signed.upload_url, { method: 'PUT', body: bytes });
  t.is(put.status, 200);
  const res = await s.call('POST', '/v1/assets', { body: { asset_id: init.asset_id, upload_id: init.upload_id, name: 'cut.bin', category: 'weight', content_type: null, size_bytes: 500, parts: [{ part_number: 1, etag: put.headers.get('etag') }] } });
  t.is(res.status, 201);
  t.true(Buffer.from(await (await fetch(res.body.asset_url)).arrayBuffer()).equals(bytes));
  const leftovers = readdirSync(join(s.dataDir, 'objects', 'uploads')).filter((d) => d === init.upload_id);
  t.deepEqual(leftovers, [], 'the upload directory is gone after finalize (no stray temp files kept it)');
});

test('a part declared larger than a part may hold (5 GiB) is answered 413 before any of it is read, and the client reads the answer', async (t) => {
  const { body: init } = await s.call('POST', '/v1/assets/initiate-upload', { body: { name: 'huge.bin', category: 'weight' } });
  const signed = (await s.call('POST', '/v1/assets/sign-part', { body: { ...init, part_number: 1 } })).body;
  const url = new URL(signed.upload_url);
  const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = http.request({ host: url.hostname, port: url.port, method: 'PUT', path: url.pathname + url.search, headers: { 'content-length': 6 * 1024 ** 3 } });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (c) => (body += c)).on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.write(randomBytes(64 * 1024)); // the first bytes of a body that would never end
  });
  t.is(answer.status, 413);
  t.like(JSON.parse(answer.body), { code: 'payload_too_large', details: { max_bytes: 5 * 1024 ** 3 } });
  const put = await fetch(signed.upload_url, { method: 'PUT', body: randomBytes(10) });
  t.is(put.status, 200, 'the same part sent within the bound is taken');
});

test('two concurrent finalizes of one upload: exactly one 201, the other 4xx', async (t) => {
  const u = await uploadParts([randomBytes(2048)]);
  const results = await Promise.all([finalize(u, { size_bytes: 2048 }), finalize(u, { size_bytes: 2048 })]);
  const statuses = results.map((r) => r.status).sort();
  t.is(statuses[0], 201);
  t.true(statuses[1]! >= 400 && statuses[1]! < 500, String(statuses[1]));
  t.is((await s.call('GET', `/v1/assets/${u.init.asset_id}`)).status, 200);
});

test('name and category must match the initiation (409)', async (t) => {
  const u = await uploadParts([randomBytes(10)]);
  const res = await finalize(u, { size_bytes: 10, name: 'renamed.bin' });
  t.is(res.status, 409);
  t.deepEqual(res.body.details.fields, ['name']);
  t.is((await finalize(u, { size_bytes: 10, category: 'video' })).status, 409);
  t.is((await finalize(u, { size_bytes: 10 })).status, 201);
});

test('parts must be numbered 1..N in order and at least one (400)', async (t) => {
  const u = await uploadParts([randomBytes(10)]);
  t.is((await finalize(u, { size_bytes: 10, parts: [] })).status, 400);
  t.is((await finalize(u, { size_bytes: 10, parts: [{ part_number: 2, etag: u.etags[0] }] })).status, 400);
  t.is((await finalize(u, { size_bytes: 10, parts: [{ part_number: 0, etag: u.etags[0] }] })).status, 400);
  t.is((await finalize(u, { size_bytes: 10, parts: [{ part_number: 1 }] })).status, 400);
  t.is((await finalize(u, { size_bytes: 10, upload_id: undefined })).status, 400);
});

test('sign-part accepts part numbers 1 and 10000, rejects 0 and 10001', async (t) => {
  const { body: init } = await s.call('POST', '/v1/assets/initiate-upload', { body: { name: 'x', category: 'video' } });
  const sign = (n: unknown) => s.call('POST', '/v1/assets/sign-part', { body: { asset_id: init.asset_id, upload_id: init.upload_id, part_number: n } });
  t.is((await sign(1)).status, 200);
  const last = await sign(10000);
  t.is(last.status, 200);
  t.is(last.body.part_number, 10000);
  t.is((await sign(0)).status, 400);
  t.is((await sign(10001)).status, 400);
  t.is((await sign('1')).status, 400);
});

test('sign-part and finalize on an unknown upload session are 404; another organization is 404 too', async (t) => {
  const { body: init } = await s.call('POST', '/v1/assets/initiate-upload', { body: { name: 'x', category: 'video' } });
  const unknown = await s.call('POST', '/v1/assets/sign-part', { body: { asset_id: randomUUID(), upload_id: init.upload_id, part_number: 1 } });
  t.is(unknown.status, 404);
  t.is(unknown.body.code, 'upload_not_found');
  t.is((await s.call('POST', '/v1/assets/sign-part', { body: { asset_id: init.asset_id, upload_id: 'other', part_number: 1 } })).status, 404);
  t.is((await s.call('POST', '/v1/assets/sign-part', { body: { asset_id: init.asset_id, upload_id: init.upload_id, part_number: 1, s3_key: 'elsewhere' } })).status, 404);
  t.is((await s.call('POST', '/v1/assets/sign-part', { key: s.keyB, body: { asset_id: init.asset_id, upload_id: init.upload_id, part_number: 1 } })).status, 404);
  const fin = await s.call('POST', '/v1/assets', {
    key: s.keyB, body: { asset_id: init.asset_id, upload_id: init.upload_id, name: 'x', category: 'video', content_type: null, size_bytes: 1, parts: [{ part_number: 1, etag: 'x' }] },
  });
  t.is(fin.status, 404);
});

test('initiate-upload validates its body', async (t) => {
  const init = (body: unknown) => s.call('POST', '/v1/assets/initiate-upload', { body });
  t.is((await init({ name: 'a', category: 'image', content_type: null, size_bytes: null })).status, 200);
  t.is((await init({ name: 'a' })).status, 400);
  t.is((await init({ category: 'image' })).status, 400);
  t.is((await init({ name: '', category: 'image' })).status, 400);
  t.is((await init({ name: 'n'.repeat(255), category: 'image' })).status, 200);
  t.is((await init({ name: 'n'.repeat(256), category: 'image' })).status, 400);
  t.is((await init({ name: 'a', category: 'Not Valid' })).status, 400);
  t.is((await init({ name: 'a', category: 'image', size_bytes: -1 })).status, 400);
  t.is((await init({ name: 'a', category: 'image', size_bytes: 1.5 })).status, 400);
  t.is((await init({ name: 'a', category: 'image', content_type: 'nonsense' })).status, 400);
});

test('signed storage URLs refuse tampering, other paths and expiry', async (t) => {
  const u = await uploadParts([randomBytes(10)]);
  const asset = (await finalize(u, { size_bytes: 10 })).body;
  const url = new URL(asset.asset_url);
  const tampered = new URL(url);
  tampered.searchParams.set('signature', 'A'.repeat(43));
  const r1 = await fetch(tampered);
  t.is(r1.status, 403);
  t.is((await r1.json()).code, 'invalid_signature');
  const retyped = new URL(url);
  retyped.searchParams.set('content_type', 'text/html');
  t.is((await fetch(retyped)).status, 403, 'the content type is covered by the signature');
  const extended = new URL(url);
  extended.searchParams.set('expires', String(Date.now() + 10 ** 9));
  t.is((await fetch(extended)).status, 403);
  t.is((await fetch(`${url.origin}${url.pathname}`)).status, 403);
  const put = await fetch(url, { method: 'PUT', body: 'x' });
  t.true(put.status === 405 || put.status === 403 || put.status === 400);
  // An already-expired URL signed by the server itself.
  const expired = await s.server.storage.signDownloadUrl(`${asset.organization_id}/${asset.asset_id}`, -1000, asset.content_type, s.server.baseUrl());
  const r2 = await fetch(expired);
  t.is(r2.status, 403);
  t.is((await r2.json()).code, 'url_expired');
});

test('list, get and delete are organization-scoped; delete is hard (object gone)', async (t) => {
  const u = await uploadParts([randomBytes(64)], { name: 'Portrait_Final.PNG', category: 'image', content_type: 'image/png' });
  const asset = (await finalize(u, { size_bytes: 64, name: 'Portrait_Final.PNG', category: 'image', content_type: 'image/png' })).body;
  const list = await s.call('GET', '/v1/assets?category=image&name=final');
  t.true(list.body.data.some((a: any) => a.asset_id === asset.asset_id), 'name matches case-insensitively by substring');
  t.true(list.body.data.every((a: any) => a.category === 'image'));
  t.true(list.body.data.every((a: any) => typeof a.asset_url === 'string'));
  t.is((await s.call('GET', '/v1/assets?name=%25')).body.data.some((a: any) => a.asset_id === asset.asset_id), false, '% is literal');
  t.false((await s.call('GET', '/v1/assets', { key: s.keyB })).body.data.some((a: any) => a.asset_id === asset.asset_id));
  for (const [method, path] of [['GET', `/v1/assets/${asset.asset_id}`], ['GET', `/v1/assets/${asset.asset_id}/download`], ['DELETE', `/v1/assets/${asset.asset_id}`]]) {
    const res = await s.call(method!, path!, { key: s.keyB });
    t.is(res.status, 404, `${method} ${path}`);
    t.is(res.body.code, 'asset_not_found');
  }
  t.is((await s.call('DELETE', `/v1/assets/${asset.asset_id}`)).status, 204);
  t.is((await s.call('GET', `/v1/assets/${asset.asset_id}`)).status, 404);
  t.is((await fetch(asset.asset_url)).status, 404, 'the stored object is gone');
  t.is((await s.call('DELETE', `/v1/assets/${asset.asset_id}`)).status, 404);
});

test('template assets are readable by everyone, never deletable (403)', async (t) => {
  const templates = await s.call('GET', '/v1/assets?source=template', { key: s.keyB });
  const face = templates.body.data.find((a: any) => a.name === 'astronaut-512.png');
  t.truthy(face);
  t.is(face.content_type, 'image/png');
  const res = await s.call('DELETE', `/v1/assets/${face.asset_id}`, { key: s.keyB });
  t.is(res.status, 403);
  t.is(res.body.code, 'template_read_only');
  const png = Buffer.from(await (await fetch((await s.call('GET', `/v1/assets/${face.asset_id}`)).body.asset_url)).arrayBuffer());
  t.deepEqual([...png.subarray(1, 4)], [0x50, 0x4e, 0x47]);
});

test('the public asset omits organization_id and created_by and always has asset_url', async (t) => {
  const u = await uploadParts([randomBytes(32)]);
  const asset = (await finalize(u, { size_bytes: 32 })).body;
  const pub = await s.call('GET', `/v1/public/assets/${asset.asset_id}`, { key: null });
  t.is(pub.status, 200);
  t.is(pub.body.organization_id, undefined);
  t.is(pub.body.created_by, undefined);
  t.is((await fetch(pub.body.asset_url)).status, 200);
  t.is((await s.call('GET', `/v1/public/assets/${randomUUID()}`, { key: null })).status, 404);
});

test('image assets run the registered asset hooks once after finalize; other assets do not', async (t) => {
  const image = randomBytes(256);
  const u = await uploadParts([image], { name: 'face.png', category: 'image', content_type: 'image/png' });
  const asset = (await finalize(u, { size_bytes: 256, name: 'face.png', category: 'image', content_type: 'image/png' })).body;
  const other = await uploadParts([randomBytes(8)]);
  const weight = (await finalize(other, { size_bytes: 8 })).body;
  await s.server.settled();
  t.is(hookCalls.filter((id) => id === asset.asset_id).length, 1);
  t.false(hookCalls.includes(weight.asset_id));
  const row = await s.server.db('assets').where('asset_id', asset.asset_id).first();
  t.deepEqual(row.analysis.digest, { sha256: createHash('sha256').update(image).digest('hex'), size: 256 });
});

test('upload sessions left open past their lifetime are swept with their parts', async (t) => {
  const u = await uploadParts([randomBytes(10)]);
  const fresh = await uploadParts([randomBytes(10)]);
  await s.server.db('upload_sessions').where('asset_id', u.init.asset_id).update({ created_at: new Date(Date.now() - s.server.config.uploadSessionTtlMs - 1000) });
  const swept = await s.server.services.assets.sweepAbandonedUploads(new Date(Date.now() - s.server.config.uploadSessionTtlMs));
  t.true(swept >= 1);
  t.is((await finalize(u, { size_bytes: 10 })).status, 404);
  const storage = s.server.storage as import('../../server/storage/index.ts').FilesystemStorage;
  t.false(await storage.hasUpload(u.init.upload_id), 'the parts are deleted');
  t.true(await storage.hasUpload(fresh.init.upload_id));
  t.is((await finalize(fresh, { size_bytes: 10 })).status, 201, 'recent uploads are kept');
});

test('the seeded template face is analysed by the asset hooks', async (t) => {
  await s.server.settled();
  const row = await s.server.db('assets').where('asset_id', '00000000-0000-4000-8000-0000000000a1').first();
  t.is(row.analysis.digest.size, 791555);
});

test('a bare asset UUID in preview_url resolves to a signed URL on the public agent record', async (t) => {
  const u = await uploadParts([Buffer.from('preview-bytes')], { name: 'p.png', category: 'image', content_type: 'image/png' });
  const asset = (await finalize(u, { size_bytes: 13, name: 'p.png', category: 'image', content_type: 'image/png' })).body;
  const agent = (await s.call('POST', '/v1/agents', { body: { title: 'previewed', preview_url: asset.asset_id } })).body;
  t.is(agent.preview_url, asset.asset_id, 'authenticated reads keep the stored value');
  const unpublished = await s.call('GET', `/v1/public/agents/${agent.agent_id}`, { key: null });
  t.is(unpublished.status, 403);
  t.is(unpublished.body.code, 'agent_unpublished');
  await s.call('PATCH', `/v1/agents/${agent.agent_id}/status`, { body: { status: 'published' } });
  const pub = await s.call('GET', `/v1/public/agents/${agent.agent_id}`, { key: null });
  t.is(pub.status, 200);
  t.regex(pub.body.preview_url, /\/v1\/storage\/objects\//);
  t.is(await (await fetch(pub.body.preview_url)).text(), 'preview-bytes');
  t.is(pub.body.system_prompt, undefined);
  t.is(pub.body.organization_id, undefined);
  await s.call('PATCH', `/v1/agents/${agent.agent_id}`, { body: { preview_url: 'https://cdn.example.com/p.jpg' } });
  t.is((await s.call('GET', `/v1/public/agents/${agent.agent_id}`, { key: null })).body.preview_url, 'https://cdn.example.com/p.jpg');
  const foreign = (await s.call('POST', '/v1/agents', { key: s.keyB, body: { title: 'borrower', preview_url: asset.asset_id } })).body;
  await s.call('PATCH', `/v1/agents/${foreign.agent_id}/status`, { key: s.keyB, body: { status: 'published' } });
  t.is((await s.call('GET', `/v1/public/agents/${foreign.agent_id}`, { key: null })).body.preview_url, null, "another organization's asset id does not resolve");
  t.is((await s.call('GET', `/v1/public/agents/${randomUUID()}`, { key: null })).status, 404);
});

test('errors from the storage routes keep the error shape', async (t) => {
  const res = await fetch(`${s.url}/v1/storage/uploads/short/parts/1?expires=1&signature=x`, { method: 'PUT', body: 'x' });
  t.is(res.status, 400);
  t.true(isErrorBody(await res.json()));
});
