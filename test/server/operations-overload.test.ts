/**
 * Overload (docs/operations.md, "Overload"): while the process's event loop lags past the capacity
 * gate's bound, a Session API admission is refused with 503 `server_busy`, `Retry-After` and the
 * spec's error body, and the refusal shows in the metrics. The server is the Session API as
 * `npm start` mounts it (real PostgreSQL, embedded rooms, the real capacity gate) in this process,
 * so that the test can make the lag itself: it blocks this event loop over and over, as a
 * saturated process is blocked. A bad lag bound stops `npm start` with one line.
 */
import test from 'ava';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createCapacityGate } from '../../server/capacity/index.ts';
import { createServerMetrics } from '../../server/operations/metrics.ts';
import { startSessionServer, type SessionTestServer } from '../sessions/session-harness.ts';

const ROOT = join(import.meta.dirname, '..', '..');
/** Only the lag decides here: the utilization and CPU bounds are out of reach. */
const gate = createCapacityGate({ limit: 8, loadCheck: { windowMs: 1000, maxEventLoopLagMs: 100, maxEventLoopUtilization: 1, maxCpuShare: 100 } });
let s: SessionTestServer;
test.before(async () => {
  s = await startSessionServer('op_overload', { sessions: { capacity: gate } });
});
test.after.always(async () => {
  await s?.stop();
  gate.close();
});

function burn(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

test.serial('while the event loop lags past the bound, POST /v1/public/agents/connect is 503 server_busy with Retry-After, and the metrics count it', async (t) => {
  const metrics = createServerMetrics({ sessions: () => s.live.sessions.stats(), capacity: gate });
  const agentId = await s.agent();
  const running = gate.tryAcquire(); // a face session runs: an idle gate admits whatever the load
  t.truthy(running);
  t.teardown(() => running?.release());

  // Saturation: the loop is blocked 150 ms out of every 250 ms, for more than a load window
  // before the request and until its answer (however long the admission takes on this machine).
  const stall = async () => {
    burn(150);
    await new Promise((resolve) => setTimeout(resolve, 100));
  };
  for (let i = 0; i < 6; i++) await stall();
  let answered = false;
  const answer = s.connect({ agent_id: agentId }).finally(() => (answered = true));
  while (!answered) await stall();
  const refused = await answer;
  const snap = gate.snapshot();
  t.true(snap.eventLoopLagMs! > 100, JSON.stringify(snap));
  t.is(refused.status, 503, refused.text);
  t.is(refused.headers.get('retry-after'), '5');
  t.deepEqual(refused.body, { error_code: 'server_busy', message: 'this server has no capacity for another session right now', retry_after_seconds: 5 });
  t.like(snap, { inUse: 1, refused: { full: 0, overloaded: 1 }, lastRefusal: 'overloaded' });
  t.is(s.live.sessions.size, 0, 'nothing was started');

  const text = await metrics.scrape();
  const sample = (series: string) => Number(text.split('\n').find((l) => l.startsWith(series + ' '))?.slice(series.length + 1));
  t.is(sample('svc_session_admissions_refused_total{reason="server_busy"}'), 1);
  t.is(sample('svc_sessions_started_total'), 0);
  t.is(sample('svc_capacity_refusals_total{reason="overloaded"}'), 1);
  t.is(sample('svc_capacity_refusals_total{reason="full"}'), 0);
  t.true(sample('svc_capacity_event_loop_lag_seconds') > 0.1, text);
});

test('a bad SVC_CAPACITY_MAX_EVENT_LOOP_LAG_MS stops npm start with one clear line', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-overload-bad-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const result = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'server/main.ts'], { cwd: ROOT, env: { ...process.env, PORT: '0', SVC_CAPACITY_MAX_EVENT_LOOP_LAG_MS: 'soon', SVC_DATA_DIR: dataDir } });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code, stderr }));
  });
  t.is(result.code, 1);
  t.is(result.stderr.trim(), 'svc server configuration error: SVC_CAPACITY_MAX_EVENT_LOOP_LAG_MS must be a positive number of milliseconds, got "soon"');
});
