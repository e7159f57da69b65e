/**
 * Issue 14 (a), fail early: a model configuration's reference image is checked when the
 * configuration is written (asset visible to the caller, an image asset, content decodes), the
 * face check (the face plugin's landmark pass, once per image asset) is readable as
 * `reference_check`, and /realtime refuses a configuration that cannot run with a code naming the
 * problem, logged. Real server, PostgreSQL, the real face plugin and its detector, real sockets.
 */
import { readFileSync } from 'node:fs';
import test from 'ava';
import sharp from 'sharp';
import { Registry } from '../../core/registry.ts';
import { facePlugin } from '../../plugins/face/index.ts';
import { attachRealtime, createRealtimeResolver, type RealtimeEndpoint } from '../../server/realtime/index.ts';
import { connectRaw, isError, isReady, type Conn } from '../realtime/ws-conn.ts';
import { IMAGE_ASSET_LIMITS } from '../../server/services/asset-hooks.ts';
import { isErrorBody, startTestServer, type TestServer } from './harness.ts';

const PORTRAIT = readFileSync(new URL('../../server/assets/astronaut-512.png', import.meta.url));
const VARIANT = 'svc/human-portrait/v1';

let ts: TestServer;
let endpoint: RealtimeEndpoint;
let wsBase: string;
const logged: Array<{ event: string; details: Record<string, unknown> }> = [];

test.before(async () => {
  ts = await startTestServer({ label: 'config_checks', plugins: [facePlugin] });
  const log = (event: string, details: Record<string, unknown>) => void logged.push({ event, details });
  endpoint = attachRealtime(ts.server.httpServer, { registry: ts.server.registry, resolver: createRealtimeResolver({ ...ts.server, log }), log });
  wsBase = `${ts.url.replace(/^http/, 'ws')}/realtime`;
});

test.after.always(async () => {
  await endpoint?.close();
  await ts?.stop();
});

/** Uploads one object through the real multipart flow; returns the finalized asset. */
async function upload(bytes: Buffer, meta: { name: string; category: string; content_type: string | null }, key = ts.keyA): Promise<any> {
  const init = await ts.call('POST', '/v1/assets/initiate-upload', { key, body: { ...meta, size_bytes: bytes.length } });
  if (init.status !== 200) throw new Error(init.text);
  const signed = await ts.call('POST', '/v1/assets/sign-part', { key, body: { asset_id: init.body.asset_id, upload_id: init.body.upload_id, part_number: 1 } });
  const put = await fetch(signed.body.upload_url, { method: 'PUT', body: new Uint8Array(bytes) });
  if (put.status !== 200) throw new Error(`part: ${put.status}`);
  const done = await ts.call('POST', '/v1/assets', {
    key,
    body: { asset_id: init.body.asset_id, upload_id: init.body.upload_id, ...meta, size_bytes: bytes.length, parts: [{ part_number: 1, etag: put.headers.get('etag') }] },
  });
  if (done.status !== 201) throw new Error(done.text);
  return done.body;
}

let titles = 0;
const createConfig = (reference: string, key = ts.keyA) =>
  ts.call('POST', '/v1/model-configs', { key, body: { title: `config ${++titles}`, model_variant_id: VARIANT, model_configurations: { reference_image_asset_id: reference, width: 320, height: 240 } } });

const connect = (configId: string): Conn => connectRaw(`${wsBase}?config_id=${encodeURIComponent(configId)}`, { 'x-api-key': ts.keyA });

const flatGrey = () => sharp({ create: { width: 320, height: 320, channels: 3, background: { r: 128, g: 128, b: 128 } } }).png().toBuffer();

test.serial('a reference asset that does not exist, or is another organization\'s, is a 404 at write, on POST and PUT', async (t) => {
  const missing = await createConfig('00000000-0000-4000-8000-00000000dead');
  t.is(missing.status, 404, missing.text);
  t.true(isErrorBody(missing.body));
  t.is(missing.body.code, 'asset_not_found');
  t.regex(missing.body.message, /reference image asset 00000000-0000-4000-8000-00000000dead not found/);
  t.is(missing.body.details.path, '/model_configurations/reference_image_asset_id');

  const foreign = await upload(PORTRAIT, { name: 'b.png', category: 'image', content_type: 'image/png' }, ts.keyB);
  const other = await createConfig(foreign.asset_id);
  t.is(other.status, 404, 'another organization\'s asset is treated as not existing');
  t.is(other.body.code, 'asset_not_found');

  const notUuid = await createConfig('not-a-uuid');
  t.is(notUuid.status, 400, 'the face variants\' schema wants a uuid');
  t.is(notUuid.body.code, 'validation_failed');

  const plain = await ts.call('POST', '/v1/model-configs', { body: { title: 'default face', model_variant_id: VARIANT, model_configurations: { width: 320, height: 240 } } });
  t.is(plain.status, 201);
  t.is(plain.body.reference_check, null, 'no reference image: nothing to check');
  const put = await ts.call('PUT', `/v1/model-configs/${plain.body.model_config_id}`, { body: { title: 'default face', model_configurations: { reference_image_asset_id: foreign.asset_id } } });
  t.is(put.status, 404);
  t.is(put.body.code, 'asset_not_found');
  const unchanged = await ts.call('GET', `/v1/model-configs/${plain.body.model_config_id}`);
  t.deepEqual(unchanged.body.model_configurations, { width: 320, height: 240 }, 'a refused PUT changes nothing');
});

test.serial('a text file uploaded as image/png, and a non-image asset, are 400 validation_failed with reason not_image', async (t) => {
  const text = await upload(Buffer.from('hello, this is not a picture\n'.repeat(20)), { name: 'face.png', category: 'image', content_type: 'image/png' });
  const res = await createConfig(text.asset_id);
  t.is(res.status, 400, res.text);
  t.true(isErrorBody(res.body));
  t.is(res.body.code, 'validation_failed');
  t.is(res.body.details.reason, 'not_image');
  t.regex(res.body.message, /not a PNG, JPEG or WebP image \(declared image\/png\)/);
  t.is(res.body.details.issues[0].path, '/model_configurations/reference_image_asset_id');

  const json = await upload(Buffer.from('{"a":1}'), { name: 'a.json', category: 'document', content_type: 'application/json' });
  const notImage = await createConfig(json.asset_id);
  t.is(notImage.status, 400);
  t.is(notImage.body.details.reason, 'not_image');
  t.regex(notImage.body.message, /is not an image asset/);

  const list = await ts.call('GET', '/v1/model-configs?limit=100');
  t.false(list.body.data.some((c: any) => [text.asset_id, json.asset_id].includes(c.model_configurations.reference_image_asset_id)), 'nothing was stored');
});

test.serial('a portrait passes: 201, then reference_check ok once the landmark pass has run; the session opens', async (t) => {
  const asset = await upload(PORTRAIT, { name: 'me.png', category: 'image', content_type: 'image/png' });
  const res = await createConfig(asset.asset_id);
  t.is(res.status, 201, res.text);
  t.like(res.body.reference_check, { asset_id: asset.asset_id });
  t.true(['pending', 'ok'].includes(res.body.reference_check.status));
  await ts.server.settled();
  const after = await ts.call('GET', `/v1/model-configs/${res.body.model_config_id}`);
  t.deepEqual(after.body.reference_check, { asset_id: asset.asset_id, status: 'ok', reason: null, message: null });
  const listed = (await ts.call('GET', '/v1/model-configs?limit=100')).body.data.find((c: any) => c.model_config_id === res.body.model_config_id);
  t.is(listed.reference_check.status, 'ok', 'lists carry the check too');

  const c = connect(res.body.model_config_id);
  t.like(await c.next(isReady), { config_id: res.body.model_config_id });
  c.ws.close();
});

test.serial('an image without a face: 201, reference_check failed/no_face, /realtime refuses with config_no_face (4422) and logs it', async (t) => {
  const asset = await upload(await flatGrey(), { name: 'wall.png', category: 'image', content_type: 'image/png' });
  const res = await createConfig(asset.asset_id);
  t.is(res.status, 201, 'it is an image: the face check runs after the 201');
  await ts.server.settled();
  const after = await ts.call('GET', `/v1/model-configs/${res.body.model_config_id}`);
  t.like(after.body.reference_check, { asset_id: asset.asset_id, status: 'failed', reason: 'no_face' });
  t.regex(after.body.reference_check.message, /no face was found/);

  const c = connect(res.body.model_config_id);
  const err = await c.next(isError('config_no_face'));
  t.like(err, { fatal: true });
  t.regex((err as { message: string }).message, new RegExp(`model configuration ${res.body.model_config_id}: no face was found`));
  t.is((await c.closed).code, 4422);
  const line = logged.find((l) => l.event === 'realtime.config_refused' && l.details['config_id'] === res.body.model_config_id);
  t.like(line?.details, { code: 'config_no_face', asset_id: asset.asset_id, reason: 'no_face' });
  t.is(endpoint.refusals()['config_no_face'], 1);
});

test.serial('a session opened before the face check finished still gets the precise code (the session runs the pass itself)', async (t) => {
  // A fresh image (new bytes, so no cached result) connected right after the 201.
  const bytes = await sharp({ create: { width: 300, height: 300, channels: 3, background: { r: 40, g: 90, b: 160 } } }).png().toBuffer();
  const asset = await upload(bytes, { name: 'sky.png', category: 'image', content_type: 'image/png' });
  const res = await createConfig(asset.asset_id);
  t.is(res.status, 201);
  const c = connect(res.body.model_config_id);
  await c.next(isError('config_no_face'), 30_000);
  t.is((await c.closed).code, 4422);
  await ts.server.settled();
});

test.serial('a reference asset deleted after the write: reference_check failed/reference_missing, /realtime config_reference_missing (4404)', async (t) => {
  const asset = await upload(PORTRAIT, { name: 'gone.png', category: 'image', content_type: 'image/png' });
  const res = await createConfig(asset.asset_id);
  t.is(res.status, 201);
  await ts.server.settled();
  t.is((await ts.call('DELETE', `/v1/assets/${asset.asset_id}`)).status, 204);
  const after = await ts.call('GET', `/v1/model-configs/${res.body.model_config_id}`);
  t.like(after.body.reference_check, { status: 'failed', reason: 'reference_missing' });

  const c = connect(res.body.model_config_id);
  const err = await c.next(isError('config_reference_missing'));
  t.regex((err as { message: string }).message, new RegExp(`reference image asset ${asset.asset_id} does not exist`));
  t.is((await c.closed).code, 4404);
  t.truthy(logged.find((l) => l.event === 'realtime.config_refused' && l.details['code'] === 'config_reference_missing'));
  // Unknown configs keep their own code.
  const unknown = connect('00000000-0000-4000-8000-000000000000');
  await unknown.next(isError('unknown_config'));
  t.is((await unknown.closed).code, 4404);
});

test.serial('content that stopped decoding after the write (replaced in storage, check not run yet) is config_reference_not_image', async (t) => {
  const asset = await upload(PORTRAIT, { name: 'later-broken.png', category: 'image', content_type: 'image/png' });
  const res = await createConfig(asset.asset_id);
  t.is(res.status, 201);
  await ts.server.settled();
  // The stored object is overwritten behind the API (a restored backup, a bucket edited by hand)
  // and its face check is gone: the session decodes the bytes itself and says what is wrong.
  const row = await ts.server.db('assets').where('asset_id', asset.asset_id).first('storage_key');
  await ts.server.storage.putObject(row.storage_key, Buffer.from('not an image any more'), 'image/png');
  await ts.server.db('assets').where('asset_id', asset.asset_id).update({ analysis: JSON.stringify({}) });
  const pending = await ts.call('GET', `/v1/model-configs/${res.body.model_config_id}`);
  t.like(pending.body.reference_check, { status: 'pending', reason: null });
  const c = connect(res.body.model_config_id);
  const err = await c.next(isError('config_reference_not_image'));
  t.regex((err as { message: string }).message, /could not be decoded/);
  t.is((await c.closed).code, 4422);
  t.like(logged.find((l) => l.event === 'realtime.config_refused' && l.details['code'] === 'config_reference_not_image')?.details, { face_model_error: 'invalid_image' });
});

test.serial('template configurations keep working: their template asset is checked ok', async (t) => {
  await ts.server.settled();
  const templates = await ts.call('GET', '/v1/model-configs?source=template');
  const portrait = templates.body.data.find((c: any) => c.model_variant_id === VARIANT);
  t.like(portrait.reference_check, { status: 'ok', asset_id: '00000000-0000-4000-8000-0000000000a1' });
  const c = connect('svc/human-portrait');
  await c.next(isReady);
  c.ws.close();
});

test.serial('a config whose variant this /realtime process does not serve is config_variant_unavailable (4404), not unknown_config', async (t) => {
  // A /realtime process deployed with only the face plugin (the REST catalogue also has the test variants).
  const registry = new Registry().use(facePlugin);
  const path = '/realtime-face-only';
  const faceOnly = attachRealtime(ts.server.httpServer, { registry, resolver: createRealtimeResolver({ ...ts.server, registry }), path });
  t.teardown(() => faceOnly.close());
  const res = await ts.call('POST', '/v1/model-configs', { body: { title: 'test variant', model_variant_id: 'svc/test-portrait/v1', model_configurations: {} } });
  t.is(res.status, 201);
  const c = connectRaw(`${ts.url.replace(/^http/, 'ws')}${path}?config_id=${res.body.model_config_id}`, { 'x-api-key': ts.keyA });
  const err = await c.next(isError('config_variant_unavailable'));
  t.regex((err as { message: string }).message, /uses model variant svc\/test-portrait\/v1, which this server does not serve/);
  t.is((await c.closed).code, 4404);
});

test.serial('an image asset over IMAGE_ASSET_LIMITS.maxReadBytes is never read whole: the face check records why, a reference is 400 not_image, a generation source 400, /realtime config_reference_not_image', async (t) => {
  t.timeout(120_000);
  // A real PNG followed by padding up to one byte over the limit: it decodes, only its size is wrong.
  const big = Buffer.concat([PORTRAIT, Buffer.alloc(IMAGE_ASSET_LIMITS.maxReadBytes + 1 - PORTRAIT.length)]);
  const asset = await upload(big, { name: 'huge.png', category: 'image', content_type: 'image/png' });
  t.is(asset.size_bytes, IMAGE_ASSET_LIMITS.maxReadBytes + 1);
  await ts.server.settled();
  const analysed = await ts.server.db('assets').where('asset_id', asset.asset_id).first('analysis');
  t.regex(String(analysed.analysis['face-landmarks']?.error), new RegExp(`the image is ${big.length} bytes; images of at most ${IMAGE_ASSET_LIMITS.maxReadBytes} bytes are read`));

  const res = await createConfig(asset.asset_id);
  t.is(res.status, 400, res.text);
  t.like(res.body, { code: 'validation_failed', details: { reason: 'not_image', asset_id: asset.asset_id } });
  t.regex(res.body.message, /bytes are read/);

  const job = await ts.call('POST', '/v1/assets/generate/idle-v1', { body: { source_asset_id: asset.asset_id, model_variant_id: VARIANT } });
  t.is(job.status, 400, job.text);
  t.like(job.body, { code: 'validation_failed' });
  t.is(job.body.details.issues[0].path, '/source_asset_id');

  // A configuration whose stored reference grew past the limit behind the API (a restored backup).
  const small = await upload(PORTRAIT, { name: 'grows.png', category: 'image', content_type: 'image/png' });
  const config = await createConfig(small.asset_id);
  t.is(config.status, 201);
  await ts.server.settled();
  const row = await ts.server.db('assets').where('asset_id', small.asset_id).first('storage_key');
  await ts.server.storage.putObject(row.storage_key, big, 'image/png');
  await ts.server.db('assets').where('asset_id', small.asset_id).update({ size_bytes: big.length, analysis: JSON.stringify({}) });
  const c = connect(config.body.model_config_id);
  const err = await c.next(isError('config_reference_not_image'));
  t.regex((err as { message: string }).message, /bytes are read/);
  t.is((await c.closed).code, 4422);
});
