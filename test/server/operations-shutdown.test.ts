/**
 * Graceful shutdown of a real `server/main.ts` process (what `npm start` runs), with a live
 * Session API session. The server reaches PostgreSQL through a TCP relay that the test can
 * stall: while it is stalled the session's end cannot be recorded, so the shutdown is held in
 * its grace period long enough to look at it from outside (no timing luck needed). Then:
 * SIGTERM makes /readyz 503 (`shutdown: draining`) while the process still serves, new
 * sessions and face connections are refused, and once the database answers again the live
 * session's call ends `server_shutdown` and the process exits 0. A second SIGTERM during a slow
 * shutdown exits at once.
 */
import test from 'ava';
import { eventually } from '../../testing/until.ts';
import { mkdtempSync, rmSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { startServerProcess, type ServerProcess } from '../sessions/server-process.ts';
import { createTestDatabase } from './harness.ts';
import { TcpRelay } from './operations-relay.ts';

const cleanups: (() => Promise<void> | void)[] = [];
test.after.always(async () => {
  for (const c of cleanups.reverse()) await c();
});


const readyz = async (p: ServerProcess) => {
  const res = await fetch(`${p.url}/readyz`, { signal: AbortSignal.timeout(20_000) });
  return { status: res.status, body: (await res.json()) as { status: string; failing?: string[]; checks: Record<string, string> } };
};

/** HTTP status of a WebSocket offer on /realtime (101 when accepted). */
const realtimeOffer = (p: ServerProcess) =>
  new Promise<number>((resolve, reject) => {
    const req = request(`${p.url}/realtime?config_id=svc/human-portrait`, {
      headers: { Connection: 'Upgrade', Upgrade: 'websocket', 'Sec-WebSocket-Version': '13', 'Sec-WebSocket-Key': 'dGhlIHNhbXBsZSBub25jZQ==' },
      timeout: 20_000,
    });
    req.on('upgrade', (res, socket) => {
      socket.destroy();
      resolve(res.statusCode ?? 0);
    });
    req.on('response', (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end();
  });

async function serverWithLiveSession(label: string) {
  const db = await createTestDatabase(label);
  cleanups.push(() => db.drop());
  const relay = TcpRelay.to(db.url);
  await relay.start();
  cleanups.push(() => relay.stop());
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-shutdown-'));
  cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
  const proc = await startServerProcess({
    // The default capacity gate: the one session is admitted by an idle gate whatever the machine's load.
    DATABASE_URL: relay.via(db.url), SVC_DATA_DIR: dataDir, SVC_SHUTDOWN_GRACE_MS: '60000',
    SVC_ENCRYPTION_KEY: 'shutdown-test-key', SVC_SIGNING_SECRET: 'shutdown-test-signing',
  });
  cleanups.push(async () => {
    proc.kill('SIGKILL');
    await proc.exited;
  });
  const key = proc.firstKey!;
  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${proc.url}${path}`, { method, headers: { 'x-api-key': key, 'content-type': 'application/json' }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
    return { status: res.status, body: (await res.json().catch(() => undefined)) as any };
  };
  const agent = await api('POST', '/v1/agents', { title: 'shutdown agent' });
  await api('PATCH', `/v1/agents/${agent.body.agent_id}`, { allowed_hostnames: ['*'] });
  await api('PATCH', `/v1/agents/${agent.body.agent_id}/status`, { status: 'published' });
  const connect = async () => {
    const res = await fetch(`${proc.url}/v1/public/agents/connect`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ agent_id: agent.body.agent_id }), signal: AbortSignal.timeout(30_000) });
    return { status: res.status, body: (await res.json()) as any };
  };
  const session = await connect();
  return { db, relay, proc, session, connect };
}

test.serial('SIGTERM: /readyz turns 503 first, new sessions and face connections are refused, the live session ends server_shutdown, exit 0', async (t) => {
  const { db, relay, proc, session, connect } = await serverWithLiveSession('op_shutdown');
  t.is(session.status, 200, JSON.stringify(session.body));
  // Ready before the signal (the face engine has loaded): the 503 below is the shutdown's.
  const before = await eventually(async () => ((await readyz(proc)).status === 200 ? true : undefined), { timeoutMs: 60_000, intervalMs: 100, what: 'ready' });
  t.true(before);

  relay.pause(); // the session's end cannot be written until resume(): the shutdown waits in its grace period
  proc.kill('SIGTERM');
  const during = await eventually(async () => {
    const r = await readyz(proc);
    return r.body.checks.shutdown === 'draining' ? r : undefined;
  }, { timeoutMs: 60_000, intervalMs: 100, what: 'readyz to say draining' });
  t.is(during.status, 503);
  t.is(during.body.status, 'unready');
  t.true(during.body.failing!.includes('shutdown'));
  t.is((await fetch(`${proc.url}/healthz`)).status, 200, 'alive while shutting down');
  const refused = await connect();
  t.is(refused.status, 503);
  t.is(refused.body.error_code, 'server_busy');
  t.regex(refused.body.message, /shutting down/);
  t.is(await realtimeOffer(proc), 503, 'no new face connections');

  relay.resume();
  const code = await Promise.race([proc.exited, new Promise<string>((r) => setTimeout(() => r('still running'), 90_000).unref())]);
  t.is(code, 0, proc.output);
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  try {
    const { rows } = await client.query('SELECT status, termination_reason FROM agent_calls');
    t.deepEqual(rows, [{ status: 'completed', termination_reason: 'server_shutdown' }]);
    t.is((await client.query('SELECT count(*)::int AS n FROM agent_sessions')).rows[0].n, 0, 'the slot is freed');
  } finally {
    await client.end();
  }
  t.notRegex(proc.output, /second SIGTERM|exiting 1/);
  t.truthy(session.body.session_id);
});

test.serial('connects in flight at SIGTERM are answered 503 server_busy, none reset, and no call is left active', async (t) => {
  const { db, relay, proc, session, connect } = await serverWithLiveSession('op_shutdown_inflight');
  t.is(session.status, 200, JSON.stringify(session.body));
  // The connects reach the server and wait for the database: in flight when the signal comes.
  relay.pause();
  const heldBefore = relay.heldChunks;
  const inFlight = Array.from({ length: 4 }, () => connect().catch((err: Error) => ({ status: 0, body: { reset: `${err.message} ${String(err.cause)}` } })));
  await eventually(async () => (relay.heldChunks >= heldBefore + 4 ? true : undefined), { timeoutMs: 60_000, intervalMs: 100, what: 'the connects to reach the database' });
  proc.kill('SIGTERM');
  await eventually(async () => ((await readyz(proc)).body.checks.shutdown === 'draining' ? true : undefined), { timeoutMs: 60_000, intervalMs: 100, what: 'readyz to say draining' });
  relay.resume();
  const answers = await Promise.all(inFlight);
  for (const answer of answers) {
    t.is(answer.status, 503, JSON.stringify(answer.body));
    t.like(answer.body, { error_code: 'server_busy', retry_after_seconds: 5 });
  }
  const code = await Promise.race([proc.exited, new Promise<string>((r) => setTimeout(() => r('still running'), 90_000).unref())]);
  t.is(code, 0, proc.output);
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  try {
    const { rows } = await client.query('SELECT status, termination_reason FROM agent_calls');
    t.false(rows.some((r) => r.status === 'active'), JSON.stringify(rows));
    t.true(rows.every((r) => r.termination_reason === 'server_shutdown'), JSON.stringify(rows));
    t.is((await client.query('SELECT count(*)::int AS n FROM agent_sessions')).rows[0].n, 0, 'every slot freed');
  } finally {
    await client.end();
  }
});

test.serial('a second SIGTERM during a slow shutdown exits at once', async (t) => {
  const { relay, proc, session } = await serverWithLiveSession('op_shutdown_twice');
  t.is(session.status, 200, JSON.stringify(session.body));
  relay.pause(); // the session's end is held: the shutdown would wait up to its 60 s grace
  proc.kill('SIGTERM');
  await eventually(async () => ((await readyz(proc)).body.checks.shutdown === 'draining' ? true : undefined), { timeoutMs: 60_000, intervalMs: 100, what: 'readyz to say draining' });
  let exitedEarly = false;
  void proc.exited.then(() => (exitedEarly = true));
  await new Promise((r) => setTimeout(r, 500));
  t.false(exitedEarly, 'the first SIGTERM is still waiting for the session');
  proc.kill('SIGTERM');
  // Bound only to catch a hang: the grace period left is about a minute.
  const code = await Promise.race([proc.exited, new Promise<string>((r) => setTimeout(() => r('still running'), 20_000).unref())]);
  t.is(code, 143);
  t.regex(proc.output, /second SIGTERM during shutdown: exiting now/);
  relay.resume();
});

test('a malformed SVC_SHUTDOWN_GRACE_MS stops npm start with one clear line', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-shutdown-bad-'));
  cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
  const result = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'server/main.ts'], { cwd: join(import.meta.dirname, '..', '..'), env: { ...process.env, PORT: '0', SVC_DATA_DIR: dataDir, SVC_SHUTDOWN_GRACE_MS: '10s' } });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code, stderr }));
  });
  t.is(result.code, 1);
  t.is(result.stderr.trim(), 'svc server configuration error: SVC_SHUTDOWN_GRACE_MS must be a whole number of milliseconds, got "10s"');
});
