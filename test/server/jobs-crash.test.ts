/**
 * Durable jobs survive `kill -9` (docs/jobs.md): a worker process killed mid-job leaves the job
 * `running` with a lease nobody renews; another worker (a second `npm run worker`, or the same
 * `npm start` restarted) reclaims it once the lease lapses and finishes it, with exactly one
 * result asset. Real processes in their own process groups, real PostgreSQL / PGlite, the real
 * idle-v1 generator (face model + ffmpeg).
 */
import test from 'ava';
import { until } from '../../testing/until.ts';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TEMPLATE_FACE_ASSET } from '../../server/services/catalogue-seed.ts';
import { startServerProcess, type ServerProcess } from '../sessions/server-process.ts';
import { SECRETS, startTestServer } from './harness.ts';
import { startWorkerProcess, type WorkerProcess } from './jobs-processes.ts';

/** Short leases so a dead worker's job is reclaimed in seconds; heartbeats with a wide margin for a loaded machine. */
const JOB_ENV = { SVC_JOB_LEASE_MS: '5000', SVC_JOB_HEARTBEAT_MS: '1000', SVC_JOB_POLL_MS: '100', SVC_JOB_RETRY_BASE_MS: '200', SVC_JOB_MAX_ATTEMPTS: '3' };
const BODY = { source_asset_id: TEMPLATE_FACE_ASSET.asset_id, model_variant_id: 'svc/human-portrait/v1' };
const ended = (job: any) => (job.status === 'succeeded' || job.status === 'failed' ? job : undefined);

test.serial('a worker process killed with SIGKILL mid-job: a second worker finishes the job, with exactly one result asset', async (t) => {
  t.timeout(300_000);
  // The API alone (SVC_WORKER=off): jobs wait in the queue for worker processes.
  const api = await startTestServer({ label: 'jobs_crash', pglite: false, config: { jobs: { runWorker: false } } });
  const workers: WorkerProcess[] = [];
  t.teardown(async () => {
    for (const w of workers) w.kill('SIGKILL');
    await Promise.all(workers.map((w) => w.exited));
    await api.stop();
  });
  const env = { ...JOB_ENV, DATABASE_URL: api.databaseUrl!, SVC_DATA_DIR: api.dataDir, SVC_ENCRYPTION_KEY: SECRETS.encryptionKey, SVC_SIGNING_SECRET: SECRETS.signingSecret };
  const getJob = async (id: string) => (await api.call('GET', `/v1/assets/generate/jobs/${id}`)).body;

  const created = await api.call('POST', '/v1/assets/generate/idle-v1', { body: BODY });
  t.is(created.status, 202);
  const jobId: string = created.body.job_id;
  const queued = await getJob(jobId);
  t.like(queued, { status: 'queued', attempts: 0, max_attempts: 3, error: null, last_error: null });
  t.truthy(Date.parse(queued.next_attempt_at), 'a queued job says when it is due');

  const first = await startWorkerProcess(env);
  workers.push(first);
  const running = await until(async () => {
    const job = await getJob(jobId);
    return job.status === 'running' ? job : undefined;
  }, { timeoutMs: 120_000, intervalMs: 10, what: 'the first worker to start the job' });
  first.kill('SIGKILL');
  await first.exited;
  const left = await api.server.db('generation_jobs').where('job_id', jobId).first();
  t.is(left.status, 'running', 'the worker died mid-job: the job had not ended');
  t.is(running.attempts, 1);
  t.regex(left.runner_id, new RegExp(`:${first.pid}:`), 'the killed worker held it');
  t.is(await api.server.db('assets').where('asset_id', left.result_asset_id).first(), undefined, 'no result asset yet');

  const second = await startWorkerProcess(env);
  workers.push(second);
  const done = await until(async () => ended(await getJob(jobId)), { timeoutMs: 180_000, intervalMs: 100, what: 'the second worker to end the job' });
  t.is(done.status, 'succeeded', `${done.error} / ${done.last_error}\n${second.output}`);
  t.is(done.attempts, 2, 'the interrupted attempt counted; the second one succeeded');
  t.regex(done.last_error, /lease lapsed/);
  t.is(done.error, null);
  const org = (await api.server.db('api_keys').first('organization_id')).organization_id;
  const videos = await api.server.db('assets').where({ organization_id: org, category: 'video' }).select('asset_id', 'size_bytes');
  t.deepEqual(videos.map((v) => v.asset_id), [done.result.asset_id], 'exactly one result asset');
  const asset = (await api.call('GET', `/v1/assets/${done.result.asset_id}`)).body;
  const mp4 = Buffer.from(await (await fetch(asset.asset_url)).arrayBuffer());
  t.is(mp4.subarray(4, 8).toString(), 'ftyp');
  t.is(mp4.length, Number(videos[0]!.size_bytes), 'the stored object is the one the asset row describes');

  // SIGTERM: the worker exits cleanly.
  second.kill('SIGTERM');
  t.is(await second.exited, 0, second.output);
});

test.serial('npm start on the embedded database (PGlite) runs jobs; killed with SIGKILL mid-job, the restarted server finishes it', async (t) => {
  t.timeout(300_000);
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-jobs-pglite-'));
  const procs: ServerProcess[] = [];
  t.teardown(async () => {
    for (const p of procs) p.kill('SIGKILL');
    await Promise.all(procs.map((p) => p.exited));
    rmSync(dataDir, { recursive: true, force: true });
  });
  const env = { ...JOB_ENV, DATABASE_URL: '', SVC_DATA_DIR: dataDir };
  const first = await startServerProcess(env);
  procs.push(first);
  const key = first.firstKey!;
  t.truthy(key, first.output);
  t.regex(first.output, /jobs:\s+worker here \(\d+ at once, 2 per organization\)/, 'npm start runs a worker by default');
  const call = async (p: ServerProcess, method: string, path: string, body?: unknown) => {
    const res = await fetch(`${p.url}${path}`, { method, headers: { 'x-api-key': key, 'content-type': 'application/json' }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
    return { status: res.status, body: (await res.json()) as any };
  };

  const created = await call(first, 'POST', '/v1/assets/generate/idle-v1', BODY);
  t.is(created.status, 202);
  const jobId: string = created.body.job_id;
  await until(async () => (await call(first, 'GET', `/v1/assets/generate/jobs/${jobId}`)).body.status === 'running', { timeoutMs: 120_000, intervalMs: 10, what: 'the server to start the job' });
  first.kill('SIGKILL');
  await first.exited;

  const second = await startServerProcess(env);
  procs.push(second);
  const done = await until(async () => ended((await call(second, 'GET', `/v1/assets/generate/jobs/${jobId}`)).body), { timeoutMs: 180_000, intervalMs: 100, what: 'the restarted server to end the job' });
  t.is(done.status, 'succeeded', `${done.error} / ${done.last_error}`);
  t.is(done.attempts, 2, `killed mid-job: the first attempt was interrupted\n${second.output}`);
  t.regex(done.last_error, /lease lapsed/);
  const videos = (await call(second, 'GET', '/v1/assets?category=video')).body;
  t.is(videos.pagination.total_items, 1, 'exactly one result asset');
  t.is(videos.data[0].asset_id, done.result.asset_id);
  const mp4 = Buffer.from(await (await fetch(videos.data[0].asset_url)).arrayBuffer());
  t.is(mp4.subarray(4, 8).toString(), 'ftyp');

  second.kill('SIGTERM');
  t.is(await second.exited, 0);
});
