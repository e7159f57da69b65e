import test from 'ava';
import { until } from '../../testing/until.ts';
import { randomUUID } from 'node:crypto';
import type { Plugin } from '../../core/registry.ts';
import type { IdleVideoGenerator, IdleVideoRequest } from '../../server/services/index.ts';
import { startTestServer, type TestServer } from './harness.ts';

const seen: IdleVideoRequest[] = [];

/** Test generators registered through the plugin API: one echoes the image back, one fails. */
const generatorsPlugin: Plugin = {
  name: 'test-generators',
  register(registry) {
    registry.register<IdleVideoGenerator>('idle-video-generator', 'echo-v1', () => ({
      async generate(request) {
        seen.push(request);
        return { data: Buffer.concat([Buffer.from('VIDEO:'), request.sourceImage]), contentType: 'video/mp4', name: 'idle.mp4' };
      },
    }));
    registry.register<IdleVideoGenerator>('idle-video-generator', 'broken', () => ({
      async generate() {
        throw new Error('renderer exploded');
      },
    }));
  },
};

let s: TestServer;
let imageId: string;
const TEMPLATE_FACE = '00000000-0000-4000-8000-0000000000a1';

test.before(async () => {
  // Retries 20 ms apart: the failing generator's attempts do not slow the file down.
  s = await startTestServer({ label: 'jobs', plugins: [generatorsPlugin], config: { jobs: { maxAttempts: 3, retryBaseMs: 20, pollMs: 50 } } });
  imageId = TEMPLATE_FACE;
});
test.after.always(async () => {
  await s?.stop();
});

const generate = (generator: string, body: Record<string, unknown>, key?: string) =>
  s.call('POST', `/v1/assets/generate/${generator}`, { key, body });

test.serial('a job is accepted with 202, runs, and succeeds with result.asset_id of a new video asset', async (t) => {
  const res = await generate('echo-v1', { source_asset_id: imageId, reference_template: 'v2', model_variant_id: 'svc/test-portrait/v1' });
  t.is(res.status, 202);
  t.regex(res.body.job_id, /^[0-9a-f-]{36}$/);
  t.deepEqual(Object.keys(res.body), ['job_id']);
  await s.server.settled();
  const job = await s.call('GET', `/v1/assets/generate/jobs/${res.body.job_id}`);
  t.is(job.status, 200);
  t.is(job.body.status, 'succeeded');
  t.is(job.body.generator, 'echo-v1');
  t.is(job.body.reference_template, 'v2');
  t.is(job.body.error, null);
  const asset = await s.call('GET', `/v1/assets/${job.body.result.asset_id}`);
  t.is(asset.status, 200);
  t.is(asset.body.category, 'video');
  t.is(asset.body.content_type, 'video/mp4');
  const bytes = Buffer.from(await (await fetch(asset.body.asset_url)).arrayBuffer());
  t.is(bytes.subarray(0, 6).toString(), 'VIDEO:');
  t.is(seen.at(-1)!.referenceTemplate, 'v2');
  t.is(seen.at(-1)!.modelVariantId, 'svc/test-portrait/v1');
});

test.serial('target_model_config_id gets model_configurations.preview on completion', async (t) => {
  const config = (await s.call('POST', '/v1/model-configs', { body: { title: 'to preview', model_variant_id: 'svc/test-portrait/v1', model_configurations: { width: 640 } } })).body;
  const res = await generate('echo-v1', { source_asset_id: imageId, target_model_config_id: config.model_config_id });
  await s.server.settled();
  const job = (await s.call('GET', `/v1/assets/generate/jobs/${res.body.job_id}`)).body;
  const after = (await s.call('GET', `/v1/model-configs/${config.model_config_id}`)).body;
  t.deepEqual(after.model_configurations, { width: 640, preview: job.result.asset_id });
});

test.serial('a failing generator ends the job as failed with its error', async (t) => {
  const res = await generate('broken', { source_asset_id: imageId });
  t.is(res.status, 202);
  // settled() does not wait out retry delays: poll until the last attempt ended it.
  const job = await until(async () => {
    const j = (await s.call('GET', `/v1/assets/generate/jobs/${res.body.job_id}`)).body;
    return j.status === 'failed' ? j : undefined;
  }, { timeoutMs: 90_000, intervalMs: 25, what: 'the job to fail' });
  t.is(job.status, 'failed');
  t.is(job.error, 'renderer exploded');
  t.is(job.result, null);
  t.is(job.attempts, 3, 'every attempt was made before failing');
  t.is(job.max_attempts, 3);
  t.is(job.last_error, 'renderer exploded');
  t.is(job.next_attempt_at, null);
});

test.serial('a job reports attempts: 0 while queued, 1 after succeeding on the first', async (t) => {
  const res = await generate('echo-v1', { source_asset_id: imageId });
  const early = (await s.call('GET', `/v1/assets/generate/jobs/${res.body.job_id}`)).body;
  t.true(['queued', 'running', 'succeeded'].includes(early.status));
  t.is(early.attempts, early.status === 'queued' ? 0 : 1);
  t.is(early.max_attempts, 3);
  if (early.status === 'queued') t.truthy(Date.parse(early.next_attempt_at));
  await s.server.settled();
  const job = (await s.call('GET', `/v1/assets/generate/jobs/${res.body.job_id}`)).body;
  t.is(job.status, 'succeeded');
  t.is(job.attempts, 1);
  t.is(job.last_error, null);
  t.is(job.next_attempt_at, null);
});

test.serial('bad requests: unknown generator 404, missing/foreign source 404, non-image 400, foreign target 404', async (t) => {
  const unknown = await generate('nope', { source_asset_id: imageId });
  t.is(unknown.status, 404);
  t.is(unknown.body.code, 'generator_not_found');
  t.is((await generate('echo-v1', {})).status, 400);
  t.is((await generate('echo-v1', { source_asset_id: randomUUID() })).status, 404);
  t.is((await generate('echo-v1', { source_asset_id: imageId, reference_template: 'v9' })).status, 400);
  t.is((await generate('echo-v1', { source_asset_id: imageId, model_variant_id: 'm'.repeat(128) })).status, 202);
  t.is((await generate('echo-v1', { source_asset_id: imageId, model_variant_id: 'm'.repeat(129) })).status, 400);
  const theirs = (await s.call('POST', '/v1/model-configs', { key: s.keyB, body: { title: 'b', model_variant_id: 'svc/test-portrait/v1' } })).body;
  t.is((await generate('echo-v1', { source_asset_id: imageId, target_model_config_id: theirs.model_config_id })).status, 404);
  const templateConfig = (await s.call('GET', '/v1/model-configs?source=template')).body.data[0];
  t.is((await generate('echo-v1', { source_asset_id: imageId, target_model_config_id: templateConfig.model_config_id })).status, 404, 'template configs are not the caller’s');
  // A non-image source.
  const init = (await s.call('POST', '/v1/assets/initiate-upload', { body: { name: 'w.bin', category: 'weight' } })).body;
  const signed = (await s.call('POST', '/v1/assets/sign-part', { body: { ...init, part_number: 1 } })).body;
  const etag = (await fetch(signed.upload_url, { method: 'PUT', body: 'abc' })).headers.get('etag');
  await s.call('POST', '/v1/assets', { body: { asset_id: init.asset_id, upload_id: init.upload_id, name: 'w.bin', category: 'weight', content_type: null, size_bytes: 3, parts: [{ part_number: 1, etag }] } });
  t.is((await generate('echo-v1', { source_asset_id: init.asset_id })).status, 400);
  await s.server.settled();
});

test.serial("jobs are organization-scoped: another organization's job is 404", async (t) => {
  const res = await generate('echo-v1', { source_asset_id: imageId });
  await s.server.settled();
  t.is((await s.call('GET', `/v1/assets/generate/jobs/${res.body.job_id}`, { key: s.keyB })).status, 404);
  t.is((await s.call('GET', `/v1/assets/generate/jobs/${randomUUID()}`)).status, 404);
  // Another organization's image is not a usable source.
  const init = (await s.call('POST', '/v1/assets/initiate-upload', { key: s.keyB, body: { name: 'b.png', category: 'image' } })).body;
  const signed = (await s.call('POST', '/v1/assets/sign-part', { key: s.keyB, body: { ...init, part_number: 1 } })).body;
  const etag = (await fetch(signed.upload_url, { method: 'PUT', body: 'png' })).headers.get('etag');
  await s.call('POST', '/v1/assets', { key: s.keyB, body: { asset_id: init.asset_id, upload_id: init.upload_id, name: 'b.png', category: 'image', content_type: null, size_bytes: 3, parts: [{ part_number: 1, etag }] } });
  const foreign = await generate('echo-v1', { source_asset_id: init.asset_id });
  t.is(foreign.status, 404);
  t.is(foreign.body.code, 'asset_not_found');
});


test.serial('a job left running by a runner that is gone (no lease: the old in-process runner, before the upgrade) is taken back and finished', async (t) => {
  const organizationId = (await s.server.db('api_keys').first('organization_id')).organization_id;
  const jobId = randomUUID();
  // As the previous version left it: running, no lease, no attempts recorded, no result asset id given.
  await s.server.db('generation_jobs').insert({ job_id: jobId, organization_id: organizationId, created_by: 'test', generator: 'echo-v1', source_asset_id: imageId, status: 'running' });
  s.server.services.generationJobs.startWorker().wake();
  const job = await until(async () => {
    const j = (await s.call('GET', `/v1/assets/generate/jobs/${jobId}`)).body;
    return j.status === 'succeeded' || j.status === 'failed' ? j : undefined;
  }, { timeoutMs: 90_000, intervalMs: 25, what: 'the job to end' });
  t.is(job.status, 'succeeded');
  t.is(job.attempts, 1, 'the unrecorded old attempt is not counted');
  t.regex(job.last_error, /lease lapsed/);
  t.is((await s.call('GET', `/v1/assets/${job.result.asset_id}`)).status, 200);
});

test.serial('finished jobs are deleted after SVC_JOB_RETENTION_MS (then 404); queued, running and recent ones stay; the result asset stays', async (t) => {
  const done = await generate('echo-v1', { source_asset_id: imageId });
  const failed = await generate('broken', { source_asset_id: imageId });
  const recent = await generate('echo-v1', { source_asset_id: imageId });
  await until(async () => (await s.call('GET', `/v1/assets/generate/jobs/${failed.body.job_id}`)).body.status === 'failed', { timeoutMs: 90_000, intervalMs: 25, what: 'the broken job to fail' });
  await s.server.settled();
  const retention = s.server.services.generationJobs.settings.retentionMs;
  t.is(retention, 30 * 24 * 3_600_000, 'the default: 30 days');
  // Two of them finished longer ago than the retention (their rows aged, as 31 days would); one
  // queued job that old (waiting for a retry, say) is not finished and stays.
  const aged = new Date(Date.now() - retention - 24 * 3_600_000);
  await s.server.db('generation_jobs').whereIn('job_id', [done.body.job_id, failed.body.job_id]).update({ updated_at: aged });
  const waiting = randomUUID();
  const template = await s.server.db('generation_jobs').where('job_id', recent.body.job_id).first();
  await s.server.db('generation_jobs').insert({ ...template, job_id: waiting, status: 'queued', result: null, run_after: new Date(Date.now() + 3_600_000), updated_at: aged, result_asset_id: randomUUID() });
  // And one running on another worker whose heartbeat has not touched the row for as long.
  const running = randomUUID();
  await s.server.db('generation_jobs').insert({ ...template, job_id: running, status: 'running', result: null, runner_id: 'another-worker', lease_expires_at: new Date(Date.now() + 3_600_000), updated_at: aged, result_asset_id: randomUUID() });
  t.teardown(() => s.server.db('generation_jobs').whereIn('job_id', [waiting, running]).delete());
  const resultAsset = (await s.call('GET', `/v1/assets/generate/jobs/${done.body.job_id}`)).body.result.asset_id;

  t.is(await s.server.services.generationJobs.sweepFinished(), 2);
  for (const gone of [done.body.job_id, failed.body.job_id]) {
    const res = await s.call('GET', `/v1/assets/generate/jobs/${gone}`);
    t.is(res.status, 404, res.text);
    t.is(res.body.code, 'job_not_found');
  }
  t.is((await s.call('GET', `/v1/assets/generate/jobs/${recent.body.job_id}`)).body.status, 'succeeded', 'a recent job stays');
  t.truthy(await s.server.db('generation_jobs').where('job_id', waiting).first(), 'a queued job stays, however old');
  t.truthy(await s.server.db('generation_jobs').where('job_id', running).first(), 'a running job stays, however old');
  t.is((await s.call('GET', `/v1/assets/${resultAsset}`)).status, 200, 'the result asset stays');
  t.is(await s.server.services.generationJobs.sweepFinished(), 0, 'nothing left to delete');
});
