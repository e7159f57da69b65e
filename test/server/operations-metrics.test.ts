/**
 * /healthz, /readyz and /metrics. The metrics test drives a real `server/main.ts` process (what
 * `npm start` runs) with real traffic (REST calls, a Session API session and a refusal, a
 * /realtime face session and a refusal, a real idle-video job and one that fails), then reads the
 * series it documents (docs/operations.md). Readiness against an unreachable database uses a real TCP relay to
 * PostgreSQL that the test stops.
 */
import test from 'ava';
import { eventually } from '../../testing/until.ts';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import WebSocket from 'ws';
import { Registry } from '../../core/registry.ts';
import { JOB_FAILURE_REASONS } from '../../server/jobs/job-worker.ts';
import { TEMPLATE_FACE_ASSET } from '../../server/services/catalogue-seed.ts';
import { buildServer } from '../../server/build-server.ts';
import { REST_ONLY } from '../../server/config/surfaces.ts';
import { metricsAccessFromEnv } from '../../server/config/env.ts';
import { startServerProcess, type ServerProcess } from '../sessions/server-process.ts';
import { createTestDatabase, SECRETS, testFacePlugin } from './harness.ts';
import { TcpRelay } from './operations-relay.ts';

const ROOT = join(import.meta.dirname, '..', '..');
const cleanups: (() => Promise<void> | void)[] = [];
test.after.always(async () => {
  for (const c of cleanups.reverse()) await c();
});


/** The value of one series (exact name and label set as exposed), or undefined when absent. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(series + ' '));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

async function startProcess(env: Record<string, string>): Promise<{ proc: ServerProcess; db: Awaited<ReturnType<typeof createTestDatabase>> }> {
  const db = await createTestDatabase('op_metrics');
  cleanups.push(() => db.drop());
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-metrics-'));
  cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
  const proc = await startServerProcess({ DATABASE_URL: db.url, SVC_DATA_DIR: dataDir, SVC_ENCRYPTION_KEY: 'metrics-test-key', SVC_SIGNING_SECRET: 'metrics-test-signing', ...env });
  cleanups.push(async () => {
    proc.kill('SIGKILL');
    await proc.exited;
  });
  return { proc, db };
}

test('metrics after real traffic: route patterns (never ids), sessions, face sessions and their frame lateness, refusals, capacity, event-loop lag, job queue depth and failures; refused without the token', async (t) => {
  t.timeout(240_000); // a real idle-video generation, bounded for a shared 2-core machine
  const token = randomBytes(24).toString('base64url');
  // One job at a time and one attempt each: the queue's depth and a failure are what the test makes.
  // Overload is not what this test is about (operations-overload.test.ts is): its face session is
  // opened while a bot runs, and a loaded test machine runs that bot's frames late before the face
  // session asks, so the late-frame bound is raised through its documented variable (1: never
  // refuses); the slots stay the default rule's.
  const { proc } = await startProcess({
    SVC_METRICS: 'token',
    SVC_METRICS_TOKEN: token,
    SVC_MAX_FACE_SESSIONS: '6',
    SVC_CAPACITY_MAX_LATE_FRAME_SHARE: '1',
    SVC_JOB_CONCURRENCY: '1',
    SVC_JOB_MAX_ATTEMPTS: '1',
  });
  const key = proc.firstKey!;
  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${proc.url}${path}`, { method, headers: { 'x-api-key': key, 'content-type': 'application/json' }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
    return { status: res.status, body: (await res.json().catch(() => undefined)) as any };
  };
  const connect = async (agentId: string) => {
    const res = await fetch(`${proc.url}/v1/public/agents/connect`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ agent_id: agentId }) });
    return { status: res.status, body: (await res.json()) as any };
  };

  // Real traffic.
  t.is((await api('GET', '/v1/agents')).status, 200);
  const agent = await api('POST', '/v1/agents', { title: 'metrics agent' });
  const agentId = agent.body.agent_id as string;
  t.is((await api('GET', `/v1/agents/${agentId}`)).status, 200);
  t.is((await api('PATCH', `/v1/agents/${agentId}`, { allowed_hostnames: ['*'] })).status, 200);
  t.is((await api('PATCH', `/v1/agents/${agentId}/status`, { status: 'published' })).status, 200);
  t.is((await api('GET', '/no/such/route/123')).status, 404);
  t.is((await connect('00000000-0000-4000-8000-000000000000')).body.error_code, 'agent_not_found');
  const session = await connect(agentId);
  t.is(session.status, 200, JSON.stringify(session.body));
  const refusedFace = await new Promise<string>((resolve) => {
    const ws = new WebSocket(`${proc.url.replace(/^http/, 'ws')}/realtime?config_id=svc/human-portrait`);
    ws.on('message', (d) => resolve(JSON.parse(String(d)).code));
    ws.on('error', () => resolve('socket error'));
  });
  t.is(refusedFace, 'auth_failed');
  const face = new WebSocket(`${proc.url.replace(/^http/, 'ws')}/realtime?config_id=svc/human-portrait`, { headers: { 'x-api-key': key } });
  cleanups.push(() => face.terminate());
  let faceFrames = 0;
  await new Promise<void>((resolve, reject) => {
    face.on('message', (d, binary) => {
      if (binary) return void faceFrames++;
      const message = JSON.parse(String(d));
      if (message.type === 'session_ready') resolve();
      else if (message.type === 'error' && message.fatal) reject(new Error(`the face session was refused: ${String(d)}`));
    });
    face.on('error', reject);
  });
  await eventually(async () => (faceFrames >= 10 ? true : undefined), { timeoutMs: 60_000, intervalMs: 100, what: 'ten face frames' });

  // Protected: no token, a wrong token.
  const none = await fetch(`${proc.url}/metrics`);
  t.is(none.status, 401);
  t.regex(none.headers.get('www-authenticate') ?? '', /^Bearer/);
  t.is((await none.json()).code, 'unauthorized');
  t.is((await fetch(`${proc.url}/metrics`, { headers: { authorization: `Bearer ${token}x` } })).status, 401);
  t.is((await fetch(`${proc.url}/metrics`, { headers: { authorization: `Basic ${token}` } })).status, 401);

  const res = await fetch(`${proc.url}/metrics`, { headers: { authorization: `Bearer ${token}` } });
  t.is(res.status, 200);
  t.regex(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
  const text = await res.text();

  const http = (method: string, route: string, status: number) => sample(text, `svc_http_request_duration_seconds_count{method="${method}",route="${route}",status="${status}"}`);
  t.is(http('GET', '/v1/agents', 200), 1);
  t.is(http('POST', '/v1/agents', 201), 1);
  const agentRoute = /route="(\/v1\/agents\/:[a-z_]+)",status="200"/.exec(text.split('\n').find((l) => l.startsWith('svc_http_request_duration_seconds_count{method="GET",route="/v1/agents/:')) ?? '')?.[1];
  t.truthy(agentRoute, 'GET /v1/agents/{id} is labelled with its pattern');
  t.is(http('GET', agentRoute!, 200), 1);
  t.is(http('GET', 'unmatched', 404), 1);
  t.is(http('POST', '/v1/public/agents/connect', 404), 1);
  t.is(http('POST', '/v1/public/agents/connect', 200), 1);
  t.true((sample(text, 'svc_http_request_duration_seconds_bucket{le="+Inf",method="GET",route="/v1/agents",status="200"}') ?? 0) === 1);
  t.false(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i.test(text), 'no raw ids in any label');
  t.false(text.includes('/no/such/route'), 'unmatched paths are not labels');

  t.is(sample(text, 'svc_sessions_live'), 1);
  t.is(sample(text, 'svc_sessions_started_total'), 1);
  t.is(sample(text, 'svc_session_admissions_refused_total{reason="agent_not_found"}'), 1);
  t.is(sample(text, 'svc_session_admissions_refused_total{reason="concurrency_limit"}'), 0);
  t.is(sample(text, 'svc_sessions_ended_total{reason="server_shutdown"}'), 0);
  t.is(sample(text, 'svc_face_sessions_live'), 1);
  t.is(sample(text, 'svc_face_sessions_refused_total{code="auth_failed"}'), 1);
  t.is(sample(text, 'svc_face_sessions_refused_total{code="server_busy"}'), 0);
  t.is(sample(text, 'svc_capacity_limit'), 6);
  t.is(sample(text, 'svc_capacity_in_use'), 2, 'one bot and one face session');
  t.is(sample(text, 'svc_capacity_refusals_total{reason="full"}'), 0);
  t.is(sample(text, 'svc_capacity_refusals_total{reason="late_frames"}'), 0);
  t.true([0, 1].includes(sample(text, 'svc_capacity_overloaded')!));
  const elu = sample(text, 'svc_capacity_event_loop_utilization')!;
  t.true(elu >= 0 && elu <= 1);
  t.true(sample(text, 'svc_capacity_event_loop_lag_seconds')! >= 0);
  // Every frame the /realtime session emitted was timed against its due time (one observation each).
  const lateness = (what: string, source: string, le?: string) => sample(text, `svc_face_frame_lateness_seconds_${what}{${le ? `le="${le}",` : ''}source="${source}"}`);
  t.true(lateness('count', 'realtime')! >= 10, 'at least the frames the client received');
  t.is(lateness('bucket', 'realtime', '+Inf'), lateness('count', 'realtime'));
  t.true(lateness('bucket', 'realtime', '0.04')! <= lateness('count', 'realtime')!);
  t.true(lateness('sum', 'realtime')! >= 0);
  t.not(lateness('count', 'bot'), undefined, 'the bot series is there from the start');
  t.true(sample(text, 'nodejs_eventloop_lag_p99_seconds')! >= 0);
  t.not(sample(text, 'nodejs_eventloop_lag_seconds'), undefined);
  t.not(sample(text, 'process_cpu_seconds_total'), undefined);
  for (const name of [
    'svc_http_request_duration_seconds histogram',
    'svc_sessions_live gauge',
    'svc_session_admissions_refused_total counter',
    'svc_face_sessions_refused_total counter',
    'svc_capacity_in_use gauge',
    'svc_capacity_event_loop_lag_seconds gauge',
    'svc_face_frame_lateness_seconds histogram',
    'svc_jobs_queue_depth gauge',
    'svc_job_failures_total counter',
  ]) {
    t.true(text.includes(`# TYPE ${name}`), name);
  }

  // The scrapes above are requests too, labelled by their fixed path.
  const again = await (await fetch(`${proc.url}/metrics`, { headers: { authorization: `Bearer ${token}` } })).text();
  t.is(sample(again, 'svc_http_request_duration_seconds_count{method="GET",route="/metrics",status="401"}'), 3);
  t.is(sample(again, 'svc_http_request_duration_seconds_count{method="GET",route="/metrics",status="200"}'), 1);

  // The bot's face session is timed too.
  const scrape = async () => (await fetch(`${proc.url}/metrics`, { headers: { authorization: `Bearer ${token}` } })).text();
  await eventually(async () => ((sample(await scrape(), 'svc_face_frame_lateness_seconds_count{source="bot"}') ?? 0) > 0 ? true : undefined), { timeoutMs: 60_000, intervalMs: 100, what: 'bot face frames timed' });

  // Jobs: a real idle-video generation (the template face, ffmpeg), and one whose source is not an
  // image (the generator fails; one attempt allowed: it fails for good).
  const broken = Buffer.from('this is not a PNG image at all');
  const init = (await api('POST', '/v1/assets/initiate-upload', { name: 'broken.png', category: 'image' })).body;
  const signed = (await api('POST', '/v1/assets/sign-part', { ...init, part_number: 1 })).body;
  const etag = (await fetch(signed.upload_url, { method: 'PUT', body: new Uint8Array(broken) })).headers.get('etag');
  const uploaded = await api('POST', '/v1/assets', { asset_id: init.asset_id, upload_id: init.upload_id, name: 'broken.png', category: 'image', content_type: 'image/png', size_bytes: broken.length, parts: [{ part_number: 1, etag }] });
  t.is(uploaded.status, 201, JSON.stringify(uploaded.body));
  const good = await api('POST', '/v1/assets/generate/idle-v1', { source_asset_id: TEMPLATE_FACE_ASSET.asset_id });
  const bad = await api('POST', '/v1/assets/generate/idle-v1', { source_asset_id: init.asset_id });
  t.is(good.status, 202);
  t.is(bad.status, 202);
  const depth = (text: string, status: string) => sample(text, `svc_jobs_queue_depth{status="${status}"}`);
  // Both are in the queue now: the first runs (a generation takes seconds), the second waits for
  // the one slot. The depth counts them, queued or running.
  const first = await scrape();
  t.is(depth(first, 'queued')! + depth(first, 'running')!, 2, first);
  t.true(depth(first, 'running')! <= 1);
  const jobStatus = async (id: string) => (await api('GET', `/v1/assets/generate/jobs/${id}`)).body.status as string;
  await eventually(async () => {
    const ended = ['succeeded', 'failed'];
    return ended.includes(await jobStatus(good.body.job_id)) && ended.includes(await jobStatus(bad.body.job_id)) ? true : undefined;
  }, { timeoutMs: 180_000, intervalMs: 100, what: 'both jobs to end' });
  t.is(await jobStatus(good.body.job_id), 'succeeded');
  t.is(await jobStatus(bad.body.job_id), 'failed');
  const after = await scrape();
  t.is(depth(after, 'queued'), 0);
  t.is(depth(after, 'running'), 0);
  for (const reason of JOB_FAILURE_REASONS) {
    for (const outcome of ['retrying', 'failed']) {
      const expected = reason === 'generator_failed' && outcome === 'failed' ? 1 : 0;
      t.is(sample(after, `svc_job_failures_total{reason="${reason}",outcome="${outcome}"}`), expected, `${reason} ${outcome}`);
    }
  }
  t.false(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i.test(after), 'no raw ids in any label');

  const health = await fetch(`${proc.url}/healthz`);
  t.deepEqual(await health.json(), { status: 'alive' });
  const ready = await eventually(async () => {
    const r = await fetch(`${proc.url}/readyz`);
    return r.status === 200 ? ((await r.json()) as any) : undefined;
  }, { timeoutMs: 60_000, intervalMs: 100, what: 'ready' });
  t.deepEqual(ready, { status: 'ready', checks: { shutdown: 'ok', database: 'ok', migrations: 'ok', face_engine: 'ok', engines: 'ok' } });
});

test('metrics are off unless switched on: 404 by default', async (t) => {
  const { proc } = await startProcess({ SVC_METRICS: '', SVC_METRICS_TOKEN: '' });
  const res = await fetch(`${proc.url}/metrics`);
  t.is(res.status, 404);
  t.regex(((await res.json()) as any).message, /metrics are off.*SVC_METRICS/);
  t.regex(proc.output, /metrics .*off: SVC_METRICS/);
});

test('SVC_METRICS settings: defaults, token rules, and a bad value stops npm start with one clear line', async (t) => {
  t.deepEqual(metricsAccessFromEnv({}), { mode: 'off' });
  t.deepEqual(metricsAccessFromEnv({ SVC_METRICS: 'public' }), { mode: 'public' });
  t.deepEqual(metricsAccessFromEnv({ SVC_METRICS_TOKEN: 'a'.repeat(16) }), { mode: 'token', token: 'a'.repeat(16) });
  t.deepEqual(metricsAccessFromEnv({ SVC_METRICS: 'off', SVC_METRICS_TOKEN: 'a'.repeat(16) }), { mode: 'off' });
  t.throws(() => metricsAccessFromEnv({ SVC_METRICS: 'token' }), { message: /SVC_METRICS=token needs SVC_METRICS_TOKEN/ });
  t.throws(() => metricsAccessFromEnv({ SVC_METRICS_TOKEN: 'short' }), { message: /at least 16 characters/ });
  t.throws(() => metricsAccessFromEnv({ SVC_METRICS: 'yes' }), { message: /SVC_METRICS must be off, token or public, got "yes"/ });

  const result = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'svc-metrics-bad-'));
    cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const child = spawn(process.execPath, ['--import', 'tsx', 'server/main.ts'], { cwd: ROOT, env: { ...process.env, PORT: '0', SVC_METRICS: 'everyone', SVC_DATA_DIR: dataDir } });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code, stderr }));
  });
  t.is(result.code, 1);
  t.is(result.stderr.trim(), 'svc server configuration error: SVC_METRICS must be off, token or public, got "everyone"');
});

test('/readyz: 503 naming the database while it is unreachable, the migrations when one is missing, the face engine while it loads; 200 otherwise', async (t) => {
  const db = await createTestDatabase('op_ready');
  cleanups.push(() => db.drop());
  const relay = TcpRelay.to(db.url);
  await relay.start();
  cleanups.push(() => relay.stop());
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-ready-'));
  cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
  let faceLoaded!: () => void;
  const server = await buildServer(
    {
      ...SECRETS, port: 0, host: '127.0.0.1', logLevel: 'silent', dataDir, databaseUrl: relay.via(db.url), database: { acquireTimeoutMs: 1000, connectTimeoutMs: 1000 },
      surfaces: { ...REST_ONLY, operations: true },
    },
    { registry: new Registry().use(testFacePlugin), faceEngine: new Promise<void>((resolve) => (faceLoaded = resolve)) },
  );
  const { url } = await server.listen();
  cleanups.push(() => server.close());
  const readyz = async () => {
    const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(20_000) });
    return { status: res.status, retryAfter: res.headers.get('retry-after'), body: (await res.json()) as any };
  };

  const loading = await readyz();
  t.is(loading.status, 503);
  t.deepEqual(loading.body, { status: 'unready', failing: ['face_engine'], checks: { shutdown: 'ok', database: 'ok', migrations: 'ok', face_engine: 'loading', engines: 'ok' } });
  t.is(loading.retryAfter, '5');
  faceLoaded();
  await new Promise((r) => setImmediate(r));
  t.is((await readyz()).status, 200);

  // The plugins' warm-up (npm start runs it after listening): unready while it runs; a failed one
  // is paid by the first use and does not keep the process unready.
  let warmed!: () => void;
  server.readiness.trackEngines(new Promise<void>((resolve) => (warmed = resolve)));
  const warming = await readyz();
  t.is(warming.status, 503);
  t.deepEqual(warming.body, { status: 'unready', failing: ['engines'], checks: { shutdown: 'ok', database: 'ok', migrations: 'ok', face_engine: 'ok', engines: 'loading' } });
  warmed();
  await new Promise((r) => setImmediate(r));
  t.is((await readyz()).status, 200);
  server.readiness.trackEngines(Promise.reject(new Error('warm-up failed')));
  await new Promise((r) => setImmediate(r));
  t.like((await readyz()).body, { status: 'ready', checks: { engines: 'ok' } }, 'a failed warm-up does not keep it unready');

  await relay.stop(); // pooled connections cut, new ones refused
  const down = await readyz();
  t.is(down.status, 503);
  t.deepEqual(down.body.failing, ['database', 'migrations']);
  t.regex(down.body.checks.database, /^(unreachable|no answer within 2000 ms)$/);
  t.is(down.body.checks.migrations, 'unknown');
  t.false(JSON.stringify(down.body).includes('127.0.0.1'), 'no connection details in the answer');
  t.is((await fetch(`${url}/healthz`)).status, 200, 'alive while the database is down');

  await relay.start(); // same port: the database is back
  await eventually(async () => ((await readyz()).status === 200 ? true : undefined), { timeoutMs: 60_000, intervalMs: 100, what: 'ready again' });

  await server.db('knex_migrations').where({ name: '002_live_sessions' }).delete();
  const pending = await readyz();
  t.is(pending.status, 503);
  t.deepEqual(pending.body.failing, ['migrations']);
  t.is(pending.body.checks.migrations, 'pending: 002_live_sessions');
  t.is((await fetch(`${url}/readyz`, { method: 'POST' })).status, 405);
  t.is((await fetch(`${url}/metrics`)).status, 404, 'no metrics unless given');
});
