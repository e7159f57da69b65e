import test from 'ava';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { SERVER_DEFAULTS } from '../../server/config/server-config.ts';
import { attachRealtime, createRealtimeResolver } from '../../server/realtime/index.ts';
import { connectRaw } from '../realtime/ws-conn.ts';
import { startFakeS3, type FakeS3 } from '../fakes/s3.ts';
import { startTestServer, type TestServer } from './harness.ts';

const MB = 1024 * 1024;
let s3: FakeS3;
let s: TestServer;

test.before(async () => {
  s3 = await startFakeS3();
  s = await startTestServer({
    label: 's3',
    config: { storage: { driver: 's3', bucket: s3.bucket, region: 'us-east-1', endpoint: s3.endpoint, forcePathStyle: true, accessKeyId: 'AKIAFAKE', secretAccessKey: 'fake-secret' } },
  });
});
test.after.always(async () => {
  await s?.stop();
  await s3?.close();
});

async function upload(parts: Buffer[]) {
  const size = parts.reduce((n, p) => n + p.length, 0);
  const init = (await s.call('POST', '/v1/assets/initiate-upload', { body: { name: 'w.bin', category: 'weight', content_type: 'application/octet-stream', size_bytes: size } })).body;
  const etags: string[] = [];
  for (const [i, part] of parts.entries()) {
    const signed = (await s.call('POST', '/v1/assets/sign-part', { body: { asset_id: init.asset_id, upload_id: init.upload_id, part_number: i + 1, s3_key: init.s3_key } })).body;
    const url = new URL(signed.upload_url);
    if (url.origin !== s3.endpoint) throw new Error(`part URL ${url.origin} is not the bucket`);
    const put = await fetch(url, { method: 'PUT', body: new Uint8Array(part) });
    if (put.status !== 200) throw new Error(`part ${i + 1}: ${put.status}`);
    etags.push(put.headers.get('etag')!);
  }
  const finalized = await s.call('POST', '/v1/assets', {
    body: { asset_id: init.asset_id, upload_id: init.upload_id, name: 'w.bin', category: 'weight', content_type: 'application/octet-stream', size_bytes: size, parts: etags.map((etag, i) => ({ part_number: i + 1, etag })) },
  });
  return { init, finalized };
}

test.serial('S3 driver: parts go straight to the bucket with pre-signed URLs; the object downloads byte-exact', async (t) => {
  const file = randomBytes(12 * MB);
  const { init, finalized } = await upload([file.subarray(0, 5 * MB), file.subarray(5 * MB, 10 * MB), file.subarray(10 * MB)]);
  t.is(finalized.status, 201, finalized.text);
  t.is(finalized.body.size_bytes, 12 * MB);
  t.regex(finalized.body.etag, /-3"$/);
  t.true(s3.objects.has(init.s3_key));
  const url = new URL(finalized.body.asset_url);
  t.is(url.origin, s3.endpoint);
  t.true(url.searchParams.has('X-Amz-Signature'));
  const bytes = Buffer.from(await (await fetch(url)).arrayBuffer());
  t.true(bytes.equals(file));
  t.true(s3.requests.every((r) => r.signed), 'every request to the bucket was signed');
});

test.serial('S3 driver: small non-final parts and wrong ETags are 409 before S3 is asked to complete', async (t) => {
  const small = await upload([randomBytes(MB), randomBytes(10)]);
  t.is(small.finalized.status, 409);
  t.is(small.finalized.body.details.reason, 'part_too_small');
  const init = (await s.call('POST', '/v1/assets/initiate-upload', { body: { name: 'e.bin', category: 'weight' } })).body;
  const signed = (await s.call('POST', '/v1/assets/sign-part', { body: { ...init, part_number: 1 } })).body;
  await fetch(signed.upload_url, { method: 'PUT', body: 'abc' });
  const res = await s.call('POST', '/v1/assets', { body: { asset_id: init.asset_id, upload_id: init.upload_id, name: 'e.bin', category: 'weight', content_type: null, size_bytes: 3, parts: [{ part_number: 1, etag: '"00000000000000000000000000000000"' }] } });
  t.is(res.status, 409);
  t.is(res.body.details.reason, 'etag_mismatch');
});

test.serial('S3 driver: delete removes the object from the bucket; template face was stored there at start', async (t) => {
  const { init, finalized } = await upload([randomBytes(100)]);
  t.is(finalized.status, 201);
  t.true(s3.objects.has(init.s3_key));
  t.is((await s.call('DELETE', `/v1/assets/${init.asset_id}`)).status, 204);
  t.false(s3.objects.has(init.s3_key));
  const templates = (await s.call('GET', '/v1/assets?source=template')).body.data;
  const png = Buffer.from(await (await fetch(templates[0].asset_url)).arrayBuffer());
  t.deepEqual([...png.subarray(1, 4)], [0x50, 0x4e, 0x47]);
});

test.serial('S3 driver: the parts of an upload are read over every ListParts page (S3 answers at most 1,000 a page)', async (t) => {
  s3.listPartsPageSize = 2; // three parts: two pages
  t.teardown(() => (s3.listPartsPageSize = 1000));
  const before = s3.requests.length;
  const file = randomBytes(11 * MB);
  const { init, finalized } = await upload([file.subarray(0, 5 * MB), file.subarray(5 * MB, 10 * MB), file.subarray(10 * MB)]);
  t.is(finalized.status, 201, finalized.text);
  t.regex(finalized.body.etag, /-3"$/);
  t.true(s3.objects.get(init.s3_key)!.data.equals(file));
  const listings = s3.requests.slice(before).filter((r) => r.method === 'GET' && r.query.includes('uploadId'));
  t.is(listings.length, 2, 'two pages read');
  t.true(listings[1]!.query.includes('part-number-marker'));
});

test.serial('S3 unavailable (connections dropped, 503s, a bucket that stops answering): 503 service_unavailable with Retry-After, nothing lost; a 403 is not a missing key', async (t) => {
  t.timeout(120_000);
  const file = randomBytes(6 * MB);
  const kept = await upload([file.subarray(0, 5 * MB), file.subarray(5 * MB)]);
  t.is(kept.finalized.status, 201, kept.finalized.text);
  const listed = async () => (await s.call('GET', '/v1/assets?limit=100')).body.data.map((a: any) => a.asset_id) as string[];
  // A reference image: a configuration written while the bucket is down is a 503, not 404 asset_not_found.
  const portrait = readFileSync(new URL('../../server/assets/astronaut-512.png', import.meta.url));
  const image = await s.call('POST', '/v1/assets/initiate-upload', { body: { name: 'me.png', category: 'image', content_type: 'image/png', size_bytes: portrait.length } });
  const imagePart = (await s.call('POST', '/v1/assets/sign-part', { body: { asset_id: image.body.asset_id, upload_id: image.body.upload_id, part_number: 1, s3_key: image.body.s3_key } })).body;
  const imageEtag = (await fetch(imagePart.upload_url, { method: 'PUT', body: new Uint8Array(portrait) })).headers.get('etag')!;
  const imageAsset = await s.call('POST', '/v1/assets', { body: { asset_id: image.body.asset_id, upload_id: image.body.upload_id, name: 'me.png', category: 'image', content_type: 'image/png', size_bytes: portrait.length, parts: [{ part_number: 1, etag: imageEtag }] } });
  t.is(imageAsset.status, 201, imageAsset.text);
  await s.server.settled();
  const config = () => s.call('POST', '/v1/model-configs', { body: { title: `s3 outage ${Math.random()}`, model_variant_id: 'svc/test-portrait/v1', model_configurations: { reference_image_asset_id: image.body.asset_id } } });

  t.teardown(() => (s3.outage = false));
  for (const outage of ['reset', '503'] as const) {
    s3.outage = outage;
    // Nothing recorded when the upload cannot start.
    const before = (await s.server.db('upload_sessions').count({ n: '*' }).first())!.n;
    const init = await s.call('POST', '/v1/assets/initiate-upload', { body: { name: 'x.bin', category: 'weight', content_type: 'application/octet-stream', size_bytes: 10 } });
    t.is(init.status, 503, `${outage}: ${init.text}`);
    t.like(init.body, { code: 'service_unavailable', details: { retry_after_seconds: SERVER_DEFAULTS.retryAfterSeconds } });
    t.regex(init.body.message, /object storage is unavailable/);
    t.is(init.headers.get('retry-after'), String(SERVER_DEFAULTS.retryAfterSeconds));
    t.is((await s.server.db('upload_sessions').count({ n: '*' }).first())!.n, before, `${outage}: no upload session recorded`);
    const written = await config();
    t.is(written.status, 503, `${outage}: ${written.text}`);

    // A delete that cannot reach the bucket keeps the asset, and can be sent again.
    const del = await s.call('DELETE', `/v1/assets/${kept.init.asset_id}`);
    t.is(del.status, 503, `${outage}: ${del.text}`);
    s3.outage = false;
    t.true((await listed()).includes(kept.init.asset_id), `${outage}: the asset is still listed`);
    t.true(s3.objects.has(kept.init.s3_key), `${outage}: and stored`);
  }

  // A finalize whose ListParts cannot reach the bucket: 503, the upload can be finalized later.
  const parts = [randomBytes(5 * MB), randomBytes(MB)];
  const init = (await s.call('POST', '/v1/assets/initiate-upload', { body: { name: 'late.bin', category: 'weight', content_type: 'application/octet-stream', size_bytes: 6 * MB } })).body;
  const etags: string[] = [];
  for (const [i, part] of parts.entries()) {
    const signed = (await s.call('POST', '/v1/assets/sign-part', { body: { asset_id: init.asset_id, upload_id: init.upload_id, part_number: i + 1, s3_key: init.s3_key } })).body;
    etags.push((await fetch(signed.upload_url, { method: 'PUT', body: new Uint8Array(part) })).headers.get('etag')!);
  }
  const body = { asset_id: init.asset_id, upload_id: init.upload_id, name: 'late.bin', category: 'weight', content_type: 'application/octet-stream', size_bytes: 6 * MB, parts: etags.map((etag, i) => ({ part_number: i + 1, etag })) };
  s3.outage = 'reset';
  const refused = await s.call('POST', '/v1/assets', { body });
  t.is(refused.status, 503, refused.text);
  s3.outage = false;
  const finalized = await s.call('POST', '/v1/assets', { body });
  t.is(finalized.status, 201, finalized.text);
  t.true(s3.objects.get(init.s3_key)!.data.equals(Buffer.concat(parts)));

  // A 403 is not a missing key (expired or wrong credentials get it too): the storage is
  // unavailable. (Credentials without s3:ListBucket get it for a missing key: the service's must have it.)
  s3.missingAs403 = true;
  t.teardown(() => (s3.missingAs403 = false));
  await t.throwsAsync(s.server.storage.headObject('no/such/key'), { name: 'StorageUnavailableError' });
  await t.throwsAsync(s.server.storage.getObject('no/such/key'), { name: 'StorageUnavailableError' });
  s3.missingAs403 = false;
  t.is(await s.server.storage.headObject('no/such/key'), null, 'a 404 is missing');
  await t.throwsAsync(s.server.storage.getObject('no/such/key'), { name: 'StorageError', message: /does not exist/ });
  t.is((await s.server.storage.getObject(init.s3_key)).length, 6 * MB, 'a stored object reads');

  const written = await config();
  t.is(written.status, 201, 'the configuration is written once the bucket answers');

  // A /realtime session whose reference cannot be read while the bucket is down: internal_error
  // (the service's fault), not config_reference_missing (which tells the customer to fix it).
  const logged: Array<{ event: string; details: Record<string, unknown> }> = [];
  const log = (event: string, details: Record<string, unknown>) => void logged.push({ event, details });
  const endpoint = attachRealtime(s.server.httpServer, { registry: s.server.registry, resolver: createRealtimeResolver({ ...s.server, log }), log });
  t.teardown(() => endpoint.close());
  s3.outage = 'reset';
  const c = connectRaw(`${s.url.replace(/^http/, 'ws')}/realtime?config_id=${written.body.model_config_id}`, { 'x-api-key': s.keyA });
  const unreadable = await c.next((m) => m.type === 'error');
  s3.outage = false;
  t.like(unreadable, { code: 'internal_error', fatal: true });
  t.like(logged.find((l) => l.event === 'realtime.reference_unreadable')?.details, { config_id: written.body.model_config_id, asset_id: image.body.asset_id });
  t.regex(String(logged.find((l) => l.event === 'realtime.reference_unreadable')?.details['error']), /S3 GetObject failed/);
  t.false(logged.some((l) => l.event === 'realtime.config_refused'), 'not refused as the configuration\'s fault');

  // Deleted for real once the bucket answers.
  t.is((await s.call('DELETE', `/v1/assets/${kept.init.asset_id}`)).status, 204);
  t.false(s3.objects.has(kept.init.s3_key));
  t.false((await listed()).includes(kept.init.asset_id));
});

test.serial('S3 that stops answering (before its answer, or in the middle of a body): a request gives up after the idle timeout (503), it does not hang', async (t) => {
  t.timeout(120_000);
  const stalled = await startTestServer({
    label: 's3_stall',
    config: { storage: { driver: 's3', bucket: s3.bucket, region: 'us-east-1', endpoint: s3.endpoint, forcePathStyle: true, accessKeyId: 'AKIAFAKE', secretAccessKey: 'fake-secret', connectTimeoutMs: 1_000, idleTimeoutMs: 500 } },
  });
  t.teardown(() => stalled.stop());
  s3.outage = 'stall';
  t.teardown(() => (s3.outage = false));
  const init = await stalled.call('POST', '/v1/assets/initiate-upload', { body: { name: 'x.bin', category: 'weight', content_type: 'application/octet-stream', size_bytes: 10 } });
  t.is(init.status, 503, init.text);
  t.is(init.body.code, 'service_unavailable');
  // An object whose body stops half-way: the read gives up (it was never bounded by a deadline at the headers).
  const key = 'stall/body.bin';
  s3.outage = false;
  await stalled.server.storage.putObject(key, randomBytes(256 * 1024), 'application/octet-stream');
  s3.outage = 'stall-body';
  await t.throwsAsync(stalled.server.storage.getObject(key), { name: 'StorageUnavailableError' });
});

test.serial('a finalize whose assembly succeeded but whose answer was lost records the object (the SDK\'s retry, or the client sending it again); other parts at that key are still a 409', async (t) => {
  t.timeout(60_000);
  const parts = [randomBytes(5 * MB), randomBytes(2 * MB)];
  const begin = async (name: string) => {
    const init = (await s.call('POST', '/v1/assets/initiate-upload', { body: { name, category: 'weight', content_type: 'application/octet-stream', size_bytes: 7 * MB } })).body;
    const etags: string[] = [];
    for (const [i, part] of parts.entries()) {
      const signed = (await s.call('POST', '/v1/assets/sign-part', { body: { asset_id: init.asset_id, upload_id: init.upload_id, part_number: i + 1, s3_key: init.s3_key } })).body;
      etags.push((await fetch(signed.upload_url, { method: 'PUT', body: new Uint8Array(parts[i]!) })).headers.get('etag')!);
    }
    return { init, body: { asset_id: init.asset_id, upload_id: init.upload_id, name, category: 'weight', content_type: 'application/octet-stream', size_bytes: 7 * MB, parts: etags.map((etag, i) => ({ part_number: i + 1, etag })) } };
  };

  // S3 assembles, the connection drops before its answer; the SDK's retry finds the upload gone.
  const lost = await begin('lost-answer.bin');
  s3.dropCompleteAnswers = 1;
  t.teardown(() => (s3.dropCompleteAnswers = 0));
  const finalized = await s.call('POST', '/v1/assets', { body: lost.body });
  t.is(finalized.status, 201, finalized.text);
  t.is(s3.dropCompleteAnswers, 0, 'the answer was dropped');
  t.is(finalized.body.size_bytes, 7 * MB);
  t.is(finalized.body.etag.replace(/"/g, ''), s3.objects.get(lost.init.s3_key)!.etag.replace(/"/g, ''));
  t.true(s3.objects.get(lost.init.s3_key)!.data.equals(Buffer.concat(parts)));
  t.is((await s.call('GET', `/v1/assets/${lost.init.asset_id}`)).status, 200);

  // The upload gone (aborted behind the API) and an object at the key made of other parts: not
  // this upload's, a 409.
  const other = await begin('other.bin');
  s3.uploads.delete(other.body.upload_id);
  s3.objects.set(other.init.s3_key, { data: Buffer.alloc(7 * MB), etag: '"00000000000000000000000000000000-2"', contentType: 'binary/octet-stream' });
  const refused = await s.call('POST', '/v1/assets', { body: other.body });
  t.is(refused.status, 409, refused.text);
  t.is(refused.body.details.reason, 'upload_missing');
  t.is((await s.call('GET', `/v1/assets/${other.init.asset_id}`)).status, 404, 'not recorded');
});
