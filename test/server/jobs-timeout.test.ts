/**
 * The attempt time limit (docs/jobs.md, SVC_JOB_ATTEMPT_TIMEOUT_MS): an attempt that runs past it
 * is stopped (its signal aborted) and fails `timed out`, retried like any failure; a handler that
 * does not stop within the grace after it is left behind, so a stuck job cannot hold a worker slot
 * (and every job queued behind it) for ever.
 */
import test from 'ava';
import { until } from '../../testing/until.ts';
import type { Plugin } from '../../core/registry.ts';
import { TEMPLATE_FACE_ASSET } from '../../server/services/catalogue-seed.ts';
import { GenerationJobs, type IdleVideoGenerator } from '../../server/services/generation-jobs.ts';
import { pino } from 'pino';
import { startTestServer, type TestServer } from './harness.ts';

const stuck = { honoursAbort: true, stopMs: 0, calls: 0, aborted: 0 };

/**
 * Never finishes: stops when its signal is aborted, `stopMs` later, rejecting with the signal's
 * reason as `fetch` does (or, `honoursAbort` false, never).
 */
const stuckPlugin: Plugin = {
  name: 'stuck-generator',
  register(registry) {
    registry.register<IdleVideoGenerator>('idle-video-generator', 'stuck', () => ({
      async generate(request) {
        stuck.calls++;
        return new Promise((_, reject) => {
          if (stuck.honoursAbort) {
            const stop = () => {
              stuck.aborted++;
              setTimeout(() => reject(request.signal.reason), stuck.stopMs);
            };
            // A loaded machine can reach the time limit before the handler starts (the job's reads
            // come first): like fetch, a signal aborted already stops it at once.
            if (request.signal.aborted) stop();
            else request.signal.addEventListener('abort', stop, { once: true });
          }
        });
      },
    }));
    registry.register<IdleVideoGenerator>('idle-video-generator', 'quick', () => ({
      async generate() {
        return { data: Buffer.from('VIDEO'), contentType: 'video/mp4', name: 'idle.mp4' };
      },
    }));
  },
};

let s: TestServer | undefined;
test.afterEach.always(async () => {
  await s?.stop();
  s = undefined;
});

const start = (label: string) =>
  startTestServer({ label, plugins: [stuckPlugin], config: { jobs: { concurrency: 1, maxAttempts: 2, retryBaseMs: 100, pollMs: 50, attemptTimeoutMs: 1_000 } } });

async function finalState(server: TestServer, id: string): Promise<any> {
  let job: any;
  await until(async () => {
    job = (await server.call('GET', `/v1/assets/generate/jobs/${id}`)).body;
    return job.status === 'succeeded' || job.status === 'failed';
  }, { timeoutMs: 60_000, intervalMs: 50, what: `job ${id} to end` });
  return job;
}

/**
 * Waits (bounded) for the worker to count a timed-out attempt. The row reads `failed` as soon as
 * the worker's transaction commits; the worker counts the failure when that write returns to it,
 * a moment later: a test that read the counter right after seeing the row raced it (a loaded CI
 * run saw `{}`). The assertion after it still says what the counter holds.
 */
async function counted(server: TestServer, outcome: 'failed' | 'retrying', n: number): Promise<void> {
  await until(() => (server.server.services.generationJobs.failures().timed_out?.[outcome] ?? 0) >= n, { timeoutMs: 10_000, what: `${n} timed-out attempt(s) counted ${outcome}` }).catch(() => undefined);
}

test.serial('an attempt past its time limit is stopped and fails "timed out", retried, then failed; a job after it runs', async (t) => {
  stuck.honoursAbort = true;
  stuck.stopMs = 0;
  stuck.calls = stuck.aborted = 0;
  s = await start('jobs_timeout');
  const res = await s.call('POST', '/v1/assets/generate/stuck', { body: { source_asset_id: TEMPLATE_FACE_ASSET.asset_id } });
  t.is(res.status, 202, res.text);
  const next = await s.call('POST', '/v1/assets/generate/quick', { body: { source_asset_id: TEMPLATE_FACE_ASSET.asset_id } });
  const job = await finalState(s, res.body.job_id);
  t.is(job.status, 'failed');
  t.is(job.attempts, 2);
  t.regex(job.error, /^timed out: the attempt ran longer than 1000 ms \(SVC_JOB_ATTEMPT_TIMEOUT_MS\)/);
  t.is(stuck.calls, 2);
  t.is(stuck.aborted, 2, 'each attempt was told to stop');
  t.is((await finalState(s, next.body.job_id)).status, 'succeeded', 'the job queued behind it ran (one slot)');
  // What svc_job_failures_total reads: one timed-out attempt retried, one that was the last (the
  // generator rejected with the signal's own reason, which the job service marks generator_failed
  // on its way: the time limit is still the class).
  await counted(s, 'failed', 1);
  t.deepEqual(s.server.services.generationJobs.failures(), { timed_out: { retrying: 1, failed: 1 } });
});

test.serial('a handler that ignores its stop is left behind after the grace: its slot is freed, the job fails "timed out"', async (t) => {
  stuck.honoursAbort = false;
  stuck.stopMs = 0;
  stuck.calls = stuck.aborted = 0;
  s = await start('jobs_timeout_ignored');
  const res = await s.call('POST', '/v1/assets/generate/stuck', { body: { source_asset_id: TEMPLATE_FACE_ASSET.asset_id } });
  const next = await s.call('POST', '/v1/assets/generate/quick', { body: { source_asset_id: TEMPLATE_FACE_ASSET.asset_id } });
  const job = await finalState(s, res.body.job_id);
  t.is(job.status, 'failed');
  t.regex(job.error, /^timed out/);
  t.is(stuck.aborted, 0, 'it never stopped');
  t.is((await finalState(s, next.body.job_id)).status, 'succeeded', 'the slot was freed for the job behind it');
});

test.serial('a job stopping slowly after its time limit keeps its lease: a second worker does not take it meanwhile', async (t) => {
  stuck.honoursAbort = true;
  stuck.stopMs = 3_000; // longer than the lease: without renewals it would lapse while stopping
  stuck.calls = stuck.aborted = 0;
  s = await startTestServer({ label: 'jobs_timeout_lease', plugins: [stuckPlugin], config: { jobs: { concurrency: 1, maxAttempts: 1, pollMs: 50, leaseMs: 1_500, heartbeatMs: 500, attemptTimeoutMs: 1_000 } } });
  const res = await s.call('POST', '/v1/assets/generate/stuck', { body: { source_asset_id: TEMPLATE_FACE_ASSET.asset_id } });
  // A second worker on the same database, as a second process would have, once the server's own
  // worker holds the job: started with it, either could claim it first (a loaded CI run saw the
  // second one run it, and the server's counters empty).
  const server = s;
  await until(async () => (await server.call('GET', `/v1/assets/generate/jobs/${res.body.job_id}`)).body.status !== 'queued', { timeoutMs: 30_000, intervalMs: 20, what: "the server's worker to claim the job" });
  const other = new GenerationJobs(s.server.db, s.server.registry, s.server.services.assets, s.server.storage, pino({ level: 'silent' }), s.server.config.jobs);
  other.startWorker();
  t.teardown(() => other.close());
  const job = await finalState(s, res.body.job_id);
  t.is(job.status, 'failed');
  t.regex(job.error, /^timed out/, 'failed by its own worker at the limit, not reaped as interrupted');
  t.is(stuck.calls, 1, 'never started by the other worker');
  await counted(s, 'failed', 1);
  t.deepEqual(s.server.services.generationJobs.failures(), { timed_out: { retrying: 0, failed: 1 } });
  t.deepEqual(other.failures(), {}, 'the other worker reaped nothing');
});
