/**
 * Two workers on one job (docs/jobs.md): a worker whose lease lapsed while it was still working
 * (a stalled process, a partitioned database) races the worker that reclaimed the job. Its late
 * result is fenced off: the job ends once, with exactly one result asset. And a worker stopped
 * cleanly gives its job back without spending an attempt.
 */
import test from 'ava';
import { until } from '../../testing/until.ts';
import { pino } from 'pino';
import type { Plugin } from '../../core/registry.ts';
import { TEMPLATE_FACE_ASSET } from '../../server/services/catalogue-seed.ts';
import { GenerationJobs, type IdleVideoGenerator } from '../../server/services/generation-jobs.ts';
import { startTestServer, type TestServer } from './harness.ts';

/** Runs held until the test lets each go; a stubborn one ignores the abort signal (a stalled worker). */
const runs: Array<{ label: string; go: () => void }> = [];
const heldPlugin: Plugin = {
  name: 'held-generator',
  register(registry) {
    registry.register<IdleVideoGenerator>('idle-video-generator', 'held', () => ({
      async generate(request) {
        const label = `run-${runs.length + 1}`;
        await new Promise<void>((resolve, reject) => {
          runs.push({ label, go: resolve });
          if (request.modelVariantId !== 'stubborn') request.signal.addEventListener('abort', () => reject(new Error('aborted')), { once: true });
        });
        return { data: Buffer.from(`VIDEO:${label}`), contentType: 'video/mp4', name: 'idle.mp4' };
      },
    }));
  },
};

let servers: TestServer[] = [];
test.afterEach.always(async () => {
  for (const r of runs) r.go();
  for (const s of servers) await s.stop();
  servers = [];
  runs.length = 0;
});

test.serial('a stalled worker whose job was reclaimed finishes late: its result is discarded, one asset, the job ends once', async (t) => {
  // Leases far longer than the test: only the lapse the test makes happens.
  const s = await startTestServer({ label: 'jobs_race', plugins: [heldPlugin], config: { jobs: { concurrency: 1, leaseMs: 120_000, heartbeatMs: 60_000, pollMs: 50, retryBaseMs: 0 } } });
  servers.push(s);
  const first = s.server.services.generationJobs.startWorker(); // the server's own worker
  const res = await s.call('POST', '/v1/assets/generate/held', { body: { source_asset_id: TEMPLATE_FACE_ASSET.asset_id, model_variant_id: 'stubborn' } });
  const jobId = res.body.job_id;
  await until(async () => runs.length === 1, { timeoutMs: 90_000, intervalMs: 25, what: 'the first worker to run the job' });

  // The first worker stalls past its lease (as if its process froze): a second worker reclaims the job.
  await s.server.db('generation_jobs').where('job_id', jobId).update({ lease_expires_at: s.server.db.raw("now() - interval '1 second'") });
  const second = new GenerationJobs(s.server.db, s.server.registry, s.server.services.assets, s.server.storage, pino({ level: 'silent' }), s.server.config.jobs);
  second.startWorker();
  t.teardown(() => second.close());
  await until(async () => runs.length === 2, { timeoutMs: 90_000, intervalMs: 25, what: 'the second worker to run the job' });
  const reclaimed = (await s.call('GET', `/v1/assets/generate/jobs/${jobId}`)).body;
  t.like(reclaimed, { status: 'running', attempts: 2 });
  t.regex(reclaimed.last_error, /lease lapsed/);

  // The stalled worker wakes up and finishes first: nothing of it is kept.
  runs[0]!.go();
  await until(async () => first.active === 0, { timeoutMs: 90_000, intervalMs: 25, what: 'the first worker to give up' });
  t.is((await s.call('GET', `/v1/assets/generate/jobs/${jobId}`)).body.status, 'running', 'still the second worker’s');
  t.is(Number((await s.server.db('assets').where('category', 'video').count('* as n').first())!.n), 0, 'the late result stored nothing');

  runs[1]!.go();
  await s.server.settled();
  const done = (await s.call('GET', `/v1/assets/generate/jobs/${jobId}`)).body;
  t.like(done, { status: 'succeeded', attempts: 2, error: null });
  const videos = await s.server.db('assets').where('category', 'video').select('asset_id', 'storage_key');
  t.deepEqual(videos.map((v) => v.asset_id), [done.result.asset_id], 'exactly one result asset');
  t.is((await s.server.storage.getObject(videos[0]!.storage_key)).toString(), 'VIDEO:run-2', 'the reclaiming worker’s video');
});

test.serial('a worker stopped cleanly (SIGTERM, restart) gives its running job back without spending an attempt', async (t) => {
  let s = await startTestServer({ label: 'jobs_release', plugins: [heldPlugin], config: { jobs: { pollMs: 50 } } });
  servers.push(s);
  const res = await s.call('POST', '/v1/assets/generate/held', { body: { source_asset_id: TEMPLATE_FACE_ASSET.asset_id } });
  const jobId = res.body.job_id;
  await until(async () => runs.length === 1, { timeoutMs: 90_000, intervalMs: 25, what: 'the job to run' });
  t.like((await s.call('GET', `/v1/assets/generate/jobs/${jobId}`)).body, { status: 'running', attempts: 1 });

  servers = [];
  s = await s.restart(); // close() stops the worker: the job is given back
  servers.push(s);
  await until(async () => runs.length === 2, { timeoutMs: 90_000, intervalMs: 25, what: 'the restarted worker to run the job' });
  runs[1]!.go();
  await s.server.settled();
  const done = (await s.call('GET', `/v1/assets/generate/jobs/${jobId}`)).body;
  t.like(done, { status: 'succeeded', attempts: 1, last_error: null }, 'the stopped run did not count as an attempt');
});

test.serial("a worker's own orphan (an attempt whose end it could not record) is reaped by that worker too, not left running for ever", async (t) => {
  const s = await startTestServer({ label: 'jobs_orphan', plugins: [heldPlugin], config: { jobs: { concurrency: 1, leaseMs: 120_000, heartbeatMs: 60_000, pollMs: 50, retryBaseMs: 0 } } });
  servers.push(s);
  const worker = s.server.services.generationJobs.startWorker();
  const body = { source_asset_id: TEMPLATE_FACE_ASSET.asset_id };
  const a = (await s.call('POST', '/v1/assets/generate/held', { body })).body.job_id;
  await until(async () => runs.length === 1, { timeoutMs: 90_000, intervalMs: 25, what: 'the worker to run the first job' });
  const b = (await s.call('POST', '/v1/assets/generate/held', { body })).body.job_id;
  // The second job as the worker leaves it when the database fails while it records the end of
  // an attempt: still `running` under the worker's id, its lease lapsing, nothing running it.
  await s.server.db('generation_jobs').where('job_id', b).update({ status: 'running', attempts: 1, runner_id: worker.runnerId, lease_expires_at: s.server.db.raw("now() - interval '1 second'") });
  await until(async () => (await s.call('GET', `/v1/assets/generate/jobs/${b}`)).body.status === 'queued', { timeoutMs: 90_000, intervalMs: 25, what: 'the worker to reap its own orphan' });
  t.regex((await s.call('GET', `/v1/assets/generate/jobs/${b}`)).body.last_error, /lease lapsed/);
  t.like((await s.call('GET', `/v1/assets/generate/jobs/${a}`)).body, { status: 'running', attempts: 1 }, 'the job it runs is not reaped');

  runs[0]!.go();
  await until(async () => runs.length === 2, { timeoutMs: 90_000, intervalMs: 25, what: 'the orphan to run again' });
  runs[1]!.go();
  await s.server.settled();
  t.like((await s.call('GET', `/v1/assets/generate/jobs/${b}`)).body, { status: 'succeeded', attempts: 2 });
});

test.serial('a closing worker keeps renewing the lease of a job slow to stop, until it stopped', async (t) => {
  const s = await startTestServer({ label: 'jobs_close_lease', plugins: [heldPlugin], config: { jobs: { concurrency: 1, leaseMs: 3_000, heartbeatMs: 200, pollMs: 50 } } });
  servers.push(s);
  const worker = s.server.services.generationJobs.startWorker();
  const jobId = (await s.call('POST', '/v1/assets/generate/held', { body: { source_asset_id: TEMPLATE_FACE_ASSET.asset_id, model_variant_id: 'stubborn' } })).body.job_id;
  await until(async () => runs.length === 1, { timeoutMs: 90_000, intervalMs: 25, what: 'the worker to run the job' });
  const lease = async () => new Date((await s.server.db('generation_jobs').where('job_id', jobId).first('lease_expires_at')).lease_expires_at).getTime();
  const closed = worker.close(); // the stubborn job ignores the abort: close() waits for it
  const atClose = await lease();
  await until(async () => (await lease()) > atClose, { timeoutMs: 90_000, intervalMs: 25, what: 'a renewal after close() began' });
  runs[0]!.go();
  await closed;
  t.like(await s.server.db('generation_jobs').where('job_id', jobId).first('status', 'attempts'), { status: 'queued', attempts: 0 }, 'given back when it stopped, its attempt not spent');
});
