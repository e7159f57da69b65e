/**
 * Concurrency bounds of durable jobs (docs/jobs.md): a worker runs at most `concurrency` jobs at
 * once, an organization at most `organizationConcurrency` across every worker; the rest wait
 * `queued` and all of them finish. Generators here hold each job until the test lets it go, so the
 * bounds are observed, not timed.
 */
import test from 'ava';
import { until } from '../../testing/until.ts';
import { pino } from 'pino';
import type { Plugin } from '../../core/registry.ts';
import { TEMPLATE_FACE_ASSET } from '../../server/services/catalogue-seed.ts';
import { GenerationJobs, type IdleVideoGenerator } from '../../server/services/generation-jobs.ts';
import { startTestServer, type TestServer } from './harness.ts';

/** Jobs in the generator now, by label (the request's model_variant_id), and the most ever seen. */
const gate = {
  now: new Map<string, number>(),
  most: new Map<string, number>(),
  calls: 0,
  held: [] as Array<() => void>,
  reset() {
    this.now.clear();
    this.most.clear();
    this.calls = 0;
    this.held = [];
  },
  enter(label: string) {
    for (const k of [label, '*']) {
      this.now.set(k, (this.now.get(k) ?? 0) + 1);
      this.most.set(k, Math.max(this.most.get(k) ?? 0, this.now.get(k)!));
    }
    this.calls++;
  },
  leave(label: string) {
    for (const k of [label, '*']) this.now.set(k, this.now.get(k)! - 1);
  },
  releaseAll() {
    const held = this.held;
    this.held = [];
    for (const go of held) go();
  },
};

const gatedPlugin: Plugin = {
  name: 'gated-generator',
  register(registry) {
    registry.register<IdleVideoGenerator>('idle-video-generator', 'gated', () => ({
      async generate(request) {
        const label = request.modelVariantId ?? '?';
        gate.enter(label);
        try {
          await new Promise<void>((resolve, reject) => {
            gate.held.push(resolve);
            request.signal.addEventListener('abort', () => reject(new Error('aborted')), { once: true });
          });
        } finally {
          gate.leave(label);
        }
        return { data: Buffer.from(`VIDEO:${label}`), contentType: 'video/mp4', name: 'idle.mp4' };
      },
    }));
  },
};

let servers: TestServer[] = [];
test.afterEach.always(async () => {
  gate.releaseAll();
  for (const s of servers) await s.stop();
  servers = [];
  gate.reset();
});

const submit = (s: TestServer, key: string, label: string) =>
  s.call('POST', '/v1/assets/generate/gated', { key, body: { source_asset_id: TEMPLATE_FACE_ASSET.asset_id, model_variant_id: label } });

/** Lets held jobs go until none is queued or running. */
async function drain(s: TestServer): Promise<void> {
  const releaser = setInterval(() => gate.releaseAll(), 20);
  try {
    await s.server.settled();
  } finally {
    clearInterval(releaser);
  }
}

test.serial('16 requests at once: one worker runs at most its concurrency (3), an organization at most 2; the rest queue and all finish', async (t) => {
  const s = await startTestServer({ label: 'jobs_conc', plugins: [gatedPlugin], config: { jobs: { concurrency: 3, organizationConcurrency: 2, pollMs: 50 } } });
  servers.push(s);
  const responses = await Promise.all(Array.from({ length: 16 }, (_, i) => (i % 2 ? submit(s, s.keyB, 'org-b') : submit(s, s.keyA, 'org-a'))));
  t.deepEqual(responses.map((r) => r.status), Array(16).fill(202));

  await until(async () => gate.now.get('*') === 3, { timeoutMs: 90_000, intervalMs: 25, what: 'three jobs in the generator' });
  const statuses = await s.server.db('generation_jobs').select('status').count('* as n').groupBy('status');
  t.deepEqual(Object.fromEntries(statuses.map((r) => [r.status, Number(r.n)])), { running: 3, queued: 13 }, 'the rest wait queued');
  const queued = (await s.call('GET', `/v1/assets/generate/jobs/${responses[15]!.body.job_id}`, { key: s.keyB })).body;
  t.true(queued.status === 'queued' || queued.status === 'running');

  await drain(s);
  t.is(gate.most.get('*'), 3, 'never more than the per-process bound');
  t.true(gate.most.get('org-a')! <= 2, `org-a ran ${gate.most.get('org-a')} at once`);
  t.true(gate.most.get('org-b')! <= 2, `org-b ran ${gate.most.get('org-b')} at once`);
  const jobs = await s.server.db('generation_jobs').select('status', 'attempts', 'result');
  t.is(jobs.length, 16);
  t.true(jobs.every((j) => j.status === 'succeeded' && j.attempts === 1), JSON.stringify(jobs.filter((j) => j.status !== 'succeeded')));
  t.is(new Set(jobs.map((j) => j.result.asset_id)).size, 16, 'one asset per job');
});

test.serial('two workers on one database: an organization never runs more than its bound however many slots are free; each job runs exactly once', async (t) => {
  const s = await startTestServer({ label: 'jobs_conc2', plugins: [gatedPlugin], config: { jobs: { concurrency: 3, organizationConcurrency: 2, pollMs: 50 } } });
  servers.push(s);
  // A second worker with its own queue connection settings, as a second process would have.
  const other = new GenerationJobs(s.server.db, s.server.registry, s.server.services.assets, s.server.storage, pino({ level: 'silent' }), s.server.config.jobs);
  other.startWorker();
  t.teardown(() => other.close());

  const responses = await Promise.all(Array.from({ length: 9 }, () => submit(s, s.keyA, 'org-a')));
  t.true(responses.every((r) => r.status === 202));
  await until(async () => gate.now.get('org-a') === 2, { timeoutMs: 90_000, intervalMs: 25, what: 'two jobs in the generator' });
  // Both workers keep polling with free slots; the organization's bound still holds.
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.is(gate.now.get('org-a'), 2);
  t.is(Number((await s.server.db('generation_jobs').where('status', 'running').count('* as n').first())!.n), 2);

  await drain(s);
  t.is(gate.most.get('org-a'), 2, '6 worker slots, 2 for the organization');
  const jobs = await s.server.db('generation_jobs').select('status', 'attempts', 'runner_id');
  t.true(jobs.every((j) => j.status === 'succeeded' && j.attempts === 1));
  t.is(gate.calls, 9, 'nine jobs, nine generator runs: no job claimed twice');
});

test.serial("an organization's waiting jobs are bounded (SVC_JOB_MAX_QUEUED): past it a generate request is 429 too_many_jobs, even from concurrent requests; others' jobs are unaffected, and a started job makes room", async (t) => {
  const s = await startTestServer({ label: 'jobs_backlog', plugins: [gatedPlugin], config: { jobs: { concurrency: 1, organizationConcurrency: 1, maxQueuedPerOrganization: 3, pollMs: 50 } } });
  servers.push(s);
  const worker = s.server.services.generationJobs.startWorker();
  const first = await submit(s, s.keyA, 'org-a');
  t.is(first.status, 202);
  await until(async () => gate.now.get('org-a') === 1, { timeoutMs: 90_000, intervalMs: 25, what: 'the first job running' });
  // Running jobs do not count; six concurrent requests for three waiting places.
  const burst = await Promise.all(Array.from({ length: 6 }, () => submit(s, s.keyA, 'org-a')));
  t.deepEqual(burst.map((r) => r.status).sort(), [202, 202, 202, 429, 429, 429]);
  const refused = burst.find((r) => r.status === 429)!;
  t.like(refused.body, { code: 'too_many_jobs', details: { queued: 3, limit: 3 } });
  t.regex(refused.body.message, /SVC_JOB_MAX_QUEUED/);
  t.is(Number((await s.server.db('generation_jobs').where({ status: 'queued' }).count('* as n').first())!.n), 3, 'nothing of the refused requests was stored');
  t.is((await submit(s, s.keyB, 'org-b')).status, 202, "another organization's request is accepted");

  // The running job ends: the next waiting one starts, and its place is free again.
  gate.releaseAll();
  await until(async () => gate.calls === 2, { timeoutMs: 90_000, intervalMs: 25, what: 'the next job to start' });
  t.is((await submit(s, s.keyA, 'org-a')).status, 202);
  t.is((await submit(s, s.keyA, 'org-a')).status, 429);
  await drain(s);
  t.is(worker.active, 0);
});
