/**
 * Job settings (docs/jobs.md): defaults, SVC_WORKER / SVC_JOB_* parsing, refusals with a message
 * naming the variable, and `npm run worker` refusing the embedded database.
 */
import test from 'ava';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EMBEDDED_JOB_POLL_MS, JOB_DEFAULTS, resolveJobSettings, retryDelayMs } from '../../server/jobs/job-settings.ts';
import { jobSettingsFromEnv, loadConfigFromEnv } from '../../server/config/env.ts';

const ROOT = join(import.meta.dirname, '..', '..');

test('defaults: a worker in npm start, 3 attempts, 15 s leases renewed every 5 s, 2 jobs per organization', (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-jobs-settings-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const { jobs } = loadConfigFromEnv({ SVC_DATA_DIR: dataDir });
  // The embedded database (no DATABASE_URL): only this process queues jobs, so it looks rarely.
  t.deepEqual(jobs, { ...JOB_DEFAULTS, pollMs: EMBEDDED_JOB_POLL_MS });
  t.is(loadConfigFromEnv({ SVC_DATA_DIR: dataDir, DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/test' }).jobs.pollMs, JOB_DEFAULTS.pollMs, 'PostgreSQL: other processes queue jobs too');
  t.is(loadConfigFromEnv({ SVC_DATA_DIR: dataDir, SVC_JOB_POLL_MS: '250' }).jobs.pollMs, 250, 'an operator\'s value wins');
  t.true(jobs.runWorker);
  t.is(jobs.maxAttempts, 3);
  t.is(jobs.leaseMs, 15_000);
  t.is(jobs.heartbeatMs, 5_000);
  t.is(jobs.organizationConcurrency, 2);
  t.is(jobs.maxQueuedPerOrganization, 100);
  t.is(jobs.attemptTimeoutMs, 600_000, 'an attempt may run 10 minutes');
  t.is(jobs.retentionMs, 30 * 24 * 3_600_000, 'a finished job stays readable 30 days');
  t.true(jobs.concurrency >= 1);
});

test('SVC_WORKER=off and SVC_JOB_* values are read; retries back off exponentially up to the cap', (t) => {
  const env = { SVC_WORKER: 'off', SVC_JOB_CONCURRENCY: '4', SVC_JOB_ORG_CONCURRENCY: '1', SVC_JOB_MAX_QUEUED: '40', SVC_JOB_MAX_ATTEMPTS: '5', SVC_JOB_RETRY_BASE_MS: '100', SVC_JOB_RETRY_MAX_MS: '350', SVC_JOB_LEASE_MS: '3000', SVC_JOB_HEARTBEAT_MS: '1000', SVC_JOB_POLL_MS: '200', SVC_JOB_ATTEMPT_TIMEOUT_MS: '90000', SVC_JOB_RETENTION_MS: '86400000' };
  const settings = resolveJobSettings(jobSettingsFromEnv(env));
  t.deepEqual(settings, { runWorker: false, concurrency: 4, organizationConcurrency: 1, maxQueuedPerOrganization: 40, maxAttempts: 5, retryBaseMs: 100, retryMaxMs: 350, leaseMs: 3000, heartbeatMs: 1000, pollMs: 200, attemptTimeoutMs: 90_000, retentionMs: 86_400_000 });
  t.deepEqual([1, 2, 3, 4].map((n) => retryDelayMs(settings, n)), [100, 200, 350, 350]);
});

test('bad values stop the configuration with a message naming the variable', (t) => {
  t.throws(() => jobSettingsFromEnv({ SVC_WORKER: 'sometimes' }), { message: /SVC_WORKER must be on or off/ });
  t.throws(() => jobSettingsFromEnv({ SVC_JOB_CONCURRENCY: 'lots' }), { message: /SVC_JOB_CONCURRENCY must be a whole number/ });
  t.throws(() => jobSettingsFromEnv({ SVC_JOB_MAX_ATTEMPTS: '-1' }), { message: /SVC_JOB_MAX_ATTEMPTS must be a whole number/ });
  t.throws(() => jobSettingsFromEnv({ SVC_JOB_MAX_ATTEMPTS: '0' }), { message: /maxAttempts must be a whole number from 1 to 20/ });
  t.throws(() => jobSettingsFromEnv({ SVC_JOB_MAX_QUEUED: '0' }), { message: /maxQueuedPerOrganization must be a whole number from 1 to 100000/ });
  t.throws(() => jobSettingsFromEnv({ SVC_JOB_LEASE_MS: '1000', SVC_JOB_HEARTBEAT_MS: '800' }), { message: /at most half the lease/ });
  t.throws(() => jobSettingsFromEnv({ SVC_JOB_ATTEMPT_TIMEOUT_MS: '500' }), { message: /attemptTimeoutMs must be a whole number from 1000 to 86400000/ });
  t.throws(() => jobSettingsFromEnv({ SVC_JOB_RETENTION_MS: '1000' }), { message: /retentionMs must be a whole number from 60000/ });
  t.throws(() => jobSettingsFromEnv({ SVC_JOB_RETENTION_MS: '1000000000000000' }), { message: /retentionMs must be a whole number from 60000 to 3153600000000/ });
});

test('npm run worker without DATABASE_URL exits 1 explaining that npm start runs embedded jobs itself', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-jobs-worker-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const child = spawn(process.execPath, ['--import', 'tsx', 'server/worker.ts'], { cwd: ROOT, env: { ...process.env, DATABASE_URL: '', SVC_DATA_DIR: dataDir }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  t.is(code, 1);
  t.regex(stderr, /svc worker configuration error: npm run worker needs DATABASE_URL/);
});
