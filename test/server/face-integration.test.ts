import test from 'ava';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Registry } from '../../core/registry.ts';
import { facePlugin } from '../../plugins/face/index.ts';
import { createServer, type AppServer } from '../../server/build-server.ts';
import { createTestDatabase, SECRETS } from './harness.ts';

// With the real face plugin: the catalogue it publishes, the landmark hook it registers, and the
// built-in idle generator rendering its idle loop.
let server: AppServer;
let url: string;
let key: string;
let drop: () => Promise<void>;
let dataDir: string;

test.before(async () => {
  const db = await createTestDatabase('face');
  drop = db.drop;
  dataDir = mkdtempSync(join(tmpdir(), 'svc-face-'));
  server = await createServer({ ...SECRETS, port: 0, host: '127.0.0.1', logLevel: 'silent', databaseUrl: db.url, dataDir }, { registry: new Registry().use(facePlugin) });
  url = (await server.listen()).url;
  key = (await server.services.apiKeys.create('face-org', 'k')).key;
});
test.after.always(async () => {
  await server?.close();
  await drop?.();
  rmSync(dataDir, { recursive: true, force: true });
});

const call = async (method: string, path: string, body?: unknown) => {
  const res = await fetch(`${url}${path}`, { method, headers: { 'x-api-key': key, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as any };
};

test.serial('the catalogue holds the face plugin variants with their real configuration schemas, and template configs validate', async (t) => {
  const variants = (await call('GET', '/v1/model-variants')).body.data;
  t.deepEqual(variants.map((v: any) => v.model_variant_id).sort(), ['svc/human-portrait/v1', 'svc/human-presence/v1']);
  const portrait = variants.find((v: any) => v.model_variant_id === 'svc/human-portrait/v1');
  t.is(portrait.configuration_schema.properties.height.maximum, 720);
  const ok = await call('POST', '/v1/model-configs', { title: 'mine', model_variant_id: 'svc/human-portrait/v1', model_configurations: { width: 1280, height: 720, fit: 'cover' } });
  t.is(ok.status, 201);
  t.is((await call('POST', '/v1/model-configs', { title: 'too tall', model_variant_id: 'svc/human-portrait/v1', model_configurations: { height: 1080 } })).status, 400, 'human-portrait is capped at 720p');
  t.is((await call('POST', '/v1/model-configs', { title: 'presence 1080', model_variant_id: 'svc/human-presence/v1', model_configurations: { width: 1920, height: 1080 } })).status, 201);
});

test.serial('expression_strength is written within 0..1 and refused outside it, on both variants', async (t) => {
  for (const variant of ['svc/human-portrait/v1', 'svc/human-presence/v1']) {
    const ok = await call('POST', '/v1/model-configs', { title: `calm ${variant}`, model_variant_id: variant, model_configurations: { expression_strength: 0.6 } });
    t.is(ok.status, 201);
    t.is(ok.body.model_configurations.expression_strength, 0.6);
    for (const bad of [1.5, -0.2, 'strong']) {
      const res = await call('POST', '/v1/model-configs', { title: 'bad', model_variant_id: variant, model_configurations: { expression_strength: bad } });
      t.is(res.status, 400, JSON.stringify(res.body));
      t.true(JSON.stringify(res.body).includes('/model_configurations/expression_strength'));
    }
  }
});

test.serial('the face plugin landmark hook analyses the template face once after it is stored', async (t) => {
  await server.settled();
  const row = await server.db('assets').where('asset_id', '00000000-0000-4000-8000-0000000000a1').first('analysis');
  const landmarks = row.analysis['face-landmarks'];
  t.truthy(landmarks, JSON.stringify(row.analysis).slice(0, 200));
  t.falsy(landmarks.error);
});

test.serial('idle-v1 renders the real human-portrait idle loop of the template face into a moving H.264 MP4', async (t) => {
  const res = await call('POST', '/v1/assets/generate/idle-v1', { source_asset_id: '00000000-0000-4000-8000-0000000000a1', model_variant_id: 'svc/human-portrait/v1' });
  t.is(res.status, 202);
  await server.settled();
  const job = (await call('GET', `/v1/assets/generate/jobs/${res.body.job_id}`)).body;
  t.is(job.status, 'succeeded', job.error ?? '');
  const asset = (await call('GET', `/v1/assets/${job.result.asset_id}`)).body;
  const mp4 = Buffer.from(await (await fetch(asset.asset_url)).arrayBuffer());
  const dir = mkdtempSync(join(tmpdir(), 'svc-face-mp4-'));
  try {
    writeFileSync(join(dir, 'v.mp4'), mp4);
    const frameAt = (n: number) => spawnSync('ffmpeg', ['-v', 'error', '-i', join(dir, 'v.mp4'), '-vf', `select=eq(n\\,${n})`, '-vframes', '1', '-f', 'rawvideo', '-pix_fmt', 'gray', 'pipe:1']).stdout;
    const first = frameAt(0);
    const middle = frameAt(75);
    t.is(first.length, 640 * 640);
    t.is(middle.length, 640 * 640);
    let differing = 0;
    for (let i = 0; i < first.length; i++) if (Math.abs(first[i]! - middle[i]!) > 8) differing++;
    t.true(differing > 100, `the face moves between frame 0 and frame 75 (${differing} pixels differ)`);
    let mean = 0;
    for (const v of middle) mean += v;
    t.true(mean / middle.length > 40, 'the frame is an image, not a black canvas');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
