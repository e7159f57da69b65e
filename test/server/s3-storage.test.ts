import test from 'ava';
import { randomBytes } from 'node:crypto';
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
