import test from 'ava';
import { holdsWithin } from '../../testing/until.ts';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { Registry } from '../../core/registry.ts';
import { createServer, type AppServer } from '../../server/build-server.ts';
import { createTestDatabase, isErrorBody, POSTGRES_URL, SECRETS, testFacePlugin } from './harness.ts';
import { TcpRelay } from './operations-relay.ts';

// Issue 17 item 5: database stalls and outages are 503 service_unavailable (Retry-After), not
// hangs or 500s, and the server recovers without a restart.

async function boot(databaseUrl: string, database: Record<string, number>, extra: Partial<Parameters<typeof createServer>[0]> = {}): Promise<{ server: AppServer; url: string; key: string; dataDir: string }> {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-sec-db-'));
  const server = await createServer(
    { ...SECRETS, port: 0, host: '127.0.0.1', logLevel: 'silent', dataDir, databaseUrl, database, ...extra },
    { registry: new Registry().use(testFacePlugin) },
  );
  const { url } = await server.listen();
  const { key } = await server.services.apiKeys.create('org-db', 'test');
  return { server, url, key, dataDir };
}

/** A request that cannot hang the test: a generous bound, not a timing goal. */
const get = async (url: string, key: string) => {
  const res = await fetch(url, { headers: { 'x-api-key': key }, signal: AbortSignal.timeout(20_000) });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : undefined };
};

test('a table locked longer than lock_timeout gives 503 service_unavailable; unrelated routes still answer; the lock gone, it answers again', async (t) => {
  const db = await createTestDatabase('sec_lock');
  const s = await boot(db.url, { lockTimeoutMs: 300 });
  const locker = new pg.Client({ connectionString: db.url });
  try {
    await locker.connect();
    t.is((await get(`${s.url}/v1/agents`, s.key)).status, 200);
    await locker.query('BEGIN');
    await locker.query('LOCK TABLE agents IN ACCESS EXCLUSIVE MODE');
    const blocked = await get(`${s.url}/v1/agents`, s.key);
    t.is(blocked.status, 503);
    t.is(blocked.body.code, 'service_unavailable');
    t.true(isErrorBody(blocked.body));
    t.is(blocked.headers.get('retry-after'), '5');
    const unrelated = await get(`${s.url}/v1/model-variants`, s.key);
    t.is(unrelated.status, 200, 'routes not touching the locked table answer');
    await locker.query('ROLLBACK');
    t.is((await get(`${s.url}/v1/agents`, s.key)).status, 200, 'answers again once the lock is released');
  } finally {
    await locker.end().catch(() => undefined);
    await s.server.close();
    await db.drop();
    rmSync(s.dataDir, { recursive: true, force: true });
  }
});

test('a Session API connect while the agents table is locked past lock_timeout: 503 server_busy with Retry-After in the Session API shape, not 500', async (t) => {
  const db = await createTestDatabase('sec_lock_session');
  // The Session API mounted. Its load check off: a loaded CI machine would answer server_busy for
  // its own reason (tested in capacity-gate.test.ts), and this test is about the database's.
  const s = await boot(db.url, { lockTimeoutMs: 300 }, { surfaces: { sessions: true, rooms: true }, capacityLoadCheck: false });
  const locker = new pg.Client({ connectionString: db.url });
  try {
    await locker.connect();
    const created = await fetch(`${s.url}/v1/agents`, { method: 'POST', headers: { 'x-api-key': s.key, 'content-type': 'application/json' }, body: JSON.stringify({ title: 'locked out' }) });
    t.is(created.status, 201);
    const agentId = ((await created.json()) as { agent_id: string }).agent_id;
    await locker.query('BEGIN');
    await locker.query('LOCK TABLE agents IN ACCESS EXCLUSIVE MODE');
    const res = await fetch(`${s.url}/v1/public/agents/connect`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ agent_id: agentId }), signal: AbortSignal.timeout(20_000) });
    t.is(res.status, 503);
    t.is(res.headers.get('retry-after'), '5');
    const body = (await res.json()) as Record<string, unknown>;
    t.is(body['error_code'], 'server_busy');
    t.is(body['retry_after_seconds'], 5);
    t.regex(String(body['message']), /database is unavailable/);
    await locker.query('ROLLBACK');
    const after = await fetch(`${s.url}/v1/public/agents/connect`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ agent_id: agentId }), signal: AbortSignal.timeout(20_000) });
    t.not(after.status, 503, 'the lock gone, the connect is decided (here: the agent is not published)');
    t.not(after.status, 500);
  } finally {
    await locker.end().catch(() => undefined);
    await s.server.close();
    await db.drop();
    rmSync(s.dataDir, { recursive: true, force: true });
  }
});

test('an unreachable database gives 503 service_unavailable, not 500, and the server recovers without a restart', async (t) => {
  const db = await createTestDatabase('sec_outage');
  // A real TCP relay between the server and PostgreSQL: stopping it is a database outage.
  const relay = TcpRelay.to(POSTGRES_URL);
  await relay.start();
  const s = await boot(relay.via(db.url), { acquireTimeoutMs: 1_000, connectTimeoutMs: 1_000 });
  try {
    t.is((await get(`${s.url}/v1/agents`, s.key)).status, 200);
    await relay.stop(); // pooled connections cut, new ones refused
    for (const path of ['/v1/agents', '/v1/assets']) {
      const res = await get(`${s.url}${path}`, s.key);
      t.is(res.status, 503, `${path}: ${JSON.stringify(res.body)}`);
      t.is(res.body.code, 'service_unavailable');
      t.true(isErrorBody(res.body));
      t.truthy(res.headers.get('retry-after'));
    }
    const fresh = await s.server.services.apiKeys.create('org-db', 'created before the outage').catch(() => null);
    t.is(fresh, null, 'the database is really unreachable');
    await relay.start(); // same port: the database is back
    let status = 0;
    await holdsWithin(async () => (status = (await get(`${s.url}/v1/agents`, s.key)).status) === 200, { timeoutMs: 10_000, intervalMs: 250 });
    t.is(status, 200, 'serves again with the same process');
  } finally {
    await s.server.close();
    await relay.stop();
    await db.drop();
    rmSync(s.dataDir, { recursive: true, force: true });
  }
});

test('a database that stops answering on open connections (a host gone without closing them): 503 after the statement timeout plus the stall margin, not a hang; served again once it answers', async (t) => {
  const db = await createTestDatabase('sec_stall');
  // A real TCP relay whose pause is the stall: the connections stay open, nothing gets through.
  const relay = TcpRelay.to(POSTGRES_URL);
  await relay.start();
  // A statement timeout the server's own start (migrations, seeding) meets on loaded cores.
  const s = await boot(relay.via(db.url), { statementTimeoutMs: 4_000, stallMarginMs: 1_000, acquireTimeoutMs: 10_000, connectTimeoutMs: 10_000 });
  try {
    t.is((await get(`${s.url}/v1/agents`, s.key)).status, 200);
    relay.pause();
    // The pool's open connections take the queries: nothing comes back. Without the guard the
    // request waits for TCP (the test's own 20 s bound would end it).
    const stalled = await get(`${s.url}/v1/agents`, s.key);
    t.is(stalled.status, 503, JSON.stringify(stalled.body));
    t.is(stalled.body.code, 'service_unavailable');
    relay.resume();
    let status = 0;
    await holdsWithin(async () => (status = (await get(`${s.url}/v1/agents`, s.key)).status) === 200, { timeoutMs: 10_000, intervalMs: 250 });
    t.is(status, 200, 'serves again with the same process (the stalled connection was dropped from the pool)');
  } finally {
    relay.resume();
    await s.server.close();
    await relay.stop();
    await db.drop();
    rmSync(s.dataDir, { recursive: true, force: true });
  }
});
