/**
 * The Session API's database rules on real PostgreSQL, through SessionStore (the code every
 * server process runs): two connection pools stand for two server processes sharing one database.
 */
import test from 'ava';
import { randomUUID } from 'node:crypto';
import knexFactory from 'knex';
import { FleetStore } from '../../server/fleet/fleet-store.ts';
import { SESSION_LEASE, SessionStore } from '../../server/sessions/session-store.ts';
import { until } from '../../testing/until.ts';
import { startTestServer, type TestServer } from '../server/harness.ts';

let s: TestServer;
test.before(async () => {
  s = await startTestServer({ label: 'session_store', pglite: false });
});
test.after.always(async () => {
  await s?.stop();
});

async function publishedAgent(fields: Record<string, unknown> = {}): Promise<string> {
  const created = await s.call('POST', '/v1/agents', { body: { title: `agent ${Math.random()}` } });
  const id = created.body.agent_id as string;
  const patched = await s.call('PATCH', `/v1/agents/${id}`, { body: { allowed_hostnames: ['*'], ...fields } });
  if (patched.status !== 200) throw new Error(patched.text);
  await s.call('PATCH', `/v1/agents/${id}/status`, { body: { status: 'published' } });
  return id;
}

const request = (agentId: string, n: number) => ({ agentId, room: `s_test_${n}_${Math.random().toString(36).slice(2)}`, roomProvider: 'embedded', clientUserRef: `user-${n}`, origin: null });

test('100 admissions racing from two processes admit exactly max_concurrency, each with one active call', async (t) => {
  const agentId = await publishedAgent({ max_concurrency: 5 });
  const other = knexFactory({ client: 'pg', connection: s.databaseUrl!, pool: { min: 0, max: 20 } });
  try {
    const a = new SessionStore(s.server.db, 'process-a');
    const b = new SessionStore(other, 'process-b');
    const results = await Promise.all(Array.from({ length: 100 }, (_, i) => (i % 2 ? a : b).admit(request(agentId, i))));
    const admitted = results.filter((r) => r.admitted);
    const refused = results.filter((r) => !r.admitted);
    t.is(admitted.length, 5);
    t.is(refused.length, 95);
    for (const r of refused) {
      t.is(r.admitted === false && r.reason, 'concurrency_limit');
      if (!r.admitted && r.reason === 'concurrency_limit') t.true(r.retryAfterSeconds >= 1 && r.retryAfterSeconds <= 300);
    }
    const calls = await s.server.db('agent_calls').where({ agent_id: agentId });
    t.is(calls.length, 5);
    t.true(calls.every((c) => c.status === 'active' && c.ended_at === null));
  } finally {
    await other.destroy();
  }
});

test('unbounded agents (-1) admit past 100; unpublished and unknown agents are refused in the transaction', async (t) => {
  const open = await publishedAgent({ max_concurrency: -1 });
  const store = new SessionStore(s.server.db, 'p');
  const results = await Promise.all(Array.from({ length: 110 }, (_, i) => store.admit(request(open, i))));
  t.true(results.every((r) => r.admitted));
  const hidden = await publishedAgent();
  await s.call('PATCH', `/v1/agents/${hidden}/status`, { body: { status: 'unpublished' } });
  t.like(await store.admit(request(hidden, 1)), { admitted: false, reason: 'agent_unpublished' });
  t.like(await store.admit(request('7c2f0f5e-8c1d-4b0e-9d7a-2a4b6c8d0e1f', 1)), { admitted: false, reason: 'agent_not_found' });
});

test('finish frees the slot and ends the call exactly once; a release is requested once per room', async (t) => {
  const agentId = await publishedAgent({ max_concurrency: 1 });
  const store = new SessionStore(s.server.db, 'p');
  const first = await store.admit(request(agentId, 1));
  if (!first.admitted) return t.fail('not admitted');
  t.like(await store.admit(request(agentId, 2)), { admitted: false, reason: 'concurrency_limit' });
  const room = (await s.server.db('agent_sessions').where('session_id', first.sessionId).first('room')).room;
  t.deepEqual(await store.requestRelease(room), { sessionId: first.sessionId, runnerId: 'p' });
  t.is(await store.requestRelease(room), null);
  t.is(await store.requestRelease('s_unknown_room'), null);
  const end = { terminationReason: 'client_released', failureReason: null, participantCount: 1, metadata: { turns: 3 } } as const;
  t.true(await store.finish(first.sessionId, first.callId, end));
  t.false(await store.finish(first.sessionId, first.callId, { ...end, terminationReason: 'pipeline_error' }));
  const call = await s.server.db('agent_calls').where('call_id', first.callId).first();
  t.like(call, { status: 'completed', termination_reason: 'client_released', failure_reason: null, participant_count: 1 });
  t.like(call.metadata, { turns: 3, room_provider: 'embedded', runner_id: 'p' });
  t.truthy(call.ended_at);
  t.true((await store.admit(request(agentId, 3))).admitted);
});

test('a lapsed lease is reaped: the slot is free again and the call failed with runner_lost; live leases are renewed, not reaped', async (t) => {
  const agentId = await publishedAgent({ max_concurrency: 2 });
  const dead = new SessionStore(s.server.db, 'dead-process');
  const alive = new SessionStore(s.server.db, 'live-process', { leaseMs: 60_000 });
  const lost = await dead.admit(request(agentId, 1));
  const kept = await alive.admit(request(agentId, 2));
  if (!lost.admitted || !kept.admitted) return t.fail('not admitted');
  t.like(await alive.admit(request(agentId, 3)), { admitted: false, reason: 'concurrency_limit' });
  // The dead process stops renewing: its lease runs out (moved into the past rather than waited for).
  await s.server.db('agent_sessions').where('session_id', lost.sessionId).update({ lease_expires_at: s.server.db.raw(`now() - interval '1 second'`) });
  // The lapsed lease no longer counts even before a reaper ran.
  const third = await alive.admit(request(agentId, 4));
  t.true(third.admitted);
  const reaped = await alive.reap();
  t.deepEqual(reaped.map((r) => r.sessionId), [lost.sessionId]);
  t.deepEqual(await alive.reap(), []);
  t.like(await s.server.db('agent_calls').where('call_id', lost.callId).first(), { status: 'failed', termination_reason: 'runner_lost', failure_reason: 'runner_lost' });
  t.like(await s.server.db('agent_calls').where('call_id', kept.callId).first(), { status: 'active' });
  const held = await alive.heartbeat([kept.sessionId, third.admitted ? third.sessionId : '', lost.sessionId]);
  t.true(held.has(kept.sessionId));
  t.false(held.has(lost.sessionId));
  t.is((await dead.heartbeat([lost.sessionId])).size, 0);
});

// Serial: its reaper reaps every lapsed row of the database, the other tests' included.
test.serial("a heartbeat renews only the sessions its process still handles: a row of its own whose end it could not record lapses and is reaped (its slot freed)", async (t) => {
  const agentId = await publishedAgent({ max_concurrency: 2 });
  const store = new SessionStore(s.server.db, `handles-${randomUUID()}`, { leaseMs: 60_000 });
  const running = await store.admit(request(agentId, 1));
  const orphan = await store.admit(request(agentId, 2));
  if (!running.admitted || !orphan.admitted) return t.fail('not admitted');
  // The orphan's lease close to its end (its finish failed; the process dropped it).
  await s.server.db('agent_sessions').where('session_id', orphan.sessionId).update({ lease_expires_at: s.server.db.raw(`now() + interval '1 second'`) });
  const held = await store.heartbeat([running.sessionId]);
  t.deepEqual([...held.keys()], [running.sessionId]);
  const lease = async (id: string) => new Date((await s.server.db('agent_sessions').where('session_id', id).first('lease_expires_at')).lease_expires_at).getTime();
  t.true((await lease(orphan.sessionId)) - Date.now() < 2_000, 'the orphan was not renewed');
  t.true((await lease(running.sessionId)) - Date.now() > 50_000, 'the running one was');
  await until(async () => (await store.reap()).some((r) => r.sessionId === orphan.sessionId), { timeoutMs: 30_000, intervalMs: 100, what: 'the orphan to be reaped' });
  t.like(await s.server.db('agent_calls').where('call_id', orphan.callId).first(), { status: 'failed', termination_reason: 'runner_lost' });
  t.true((await store.admit(request(agentId, 3))).admitted, "the agent's slot is free again");
  t.deepEqual([...(await store.heartbeat([])).keys()], [], 'nothing handled, nothing renewed (no query)');
});

test('retry_after_seconds follows the live sessions: the soonest hard end when there is no history', async (t) => {
  const agentId = await publishedAgent({ max_concurrency: 1, session_limit_seconds: 40 });
  const store = new SessionStore(s.server.db, 'p');
  t.true((await store.admit(request(agentId, 1))).admitted);
  const refused = await store.admit(request(agentId, 2));
  if (refused.admitted || refused.reason !== 'concurrency_limit') return t.fail('expected a refusal');
  t.true(refused.retryAfterSeconds >= 38 && refused.retryAfterSeconds <= 40, String(refused.retryAfterSeconds));
});

test('retry_after_seconds with history: the median length of the recent completed calls, less the oldest live session\'s age; a batch admits and writes both rows in one statement', async (t) => {
  const agentId = await publishedAgent({ max_concurrency: 2, session_limit_seconds: 300 });
  const organizationId = (await s.server.db('agents').where('agent_id', agentId).first('organization_id')).organization_id as string;
  // Three completed calls of 20, 30 and 40 s (median 30), ended a while ago.
  await s.server.db('agent_calls').insert([20, 30, 40].map((seconds, i) => ({
    call_id: randomUUID(), agent_id: agentId, organization_id: organizationId, session_id: randomUUID(), applied_session_limit_seconds: 300,
    started_at: s.server.db.raw(`now() - make_interval(secs => ?)`, [600 + i + seconds]), ended_at: s.server.db.raw(`now() - make_interval(secs => ?)`, [600 + i]),
    status: 'completed', participant_count: 1, metadata: '{}',
  })));
  const store = new SessionStore(s.server.db, 'history-process');
  // Three at once: one batch (admission-line.ts), two admitted, one refused.
  const answers = await Promise.all([1, 2, 3].map((n) => store.admit(request(agentId, 100 + n))));
  const admitted = answers.filter((a) => a.admitted);
  t.is(admitted.length, 2);
  for (const a of admitted) {
    if (!a.admitted) continue;
    t.like(await s.server.db('agent_sessions').where('session_id', a.sessionId).first(), { call_id: a.callId, agent_id: agentId, status: 'starting', runner_id: 'history-process' });
    t.like(await s.server.db('agent_calls').where('call_id', a.callId).first(), { session_id: a.sessionId, agent_id: agentId, status: 'active', applied_session_limit_seconds: 300 });
  }
  const refused = answers.find((a) => !a.admitted);
  if (!refused || refused.admitted || refused.reason !== 'concurrency_limit') return t.fail('expected a refusal');
  // min(the soonest hard end, ~300 s; max(30 s median - the oldest live session's age (about 0), 5)).
  t.true(refused.retryAfterSeconds >= 29 && refused.retryAfterSeconds <= 30, String(refused.retryAfterSeconds));
});

test("a started session's `active` write that fails (a lock held past lock_timeout) is tried again until it lands; close() stops the tries", async (t) => {
  const agentId = await publishedAgent({ max_concurrency: 5 });
  // A process whose statements give up on a lock after 100 ms, as a contended database makes them.
  const impatient = knexFactory({ client: 'pg', connection: { connectionString: s.databaseUrl!, lock_timeout: 100 } as never, pool: { min: 0, max: 4 } });
  const locker = knexFactory({ client: 'pg', connection: s.databaseUrl!, pool: { min: 0, max: 2 } });
  try {
    const statusOf = async (id: string) => (await s.server.db('agent_sessions').where('session_id', id).first('status'))?.status as string | undefined;
    /** Holds the session's row locked until the returned function is called. */
    const lockRow = async (id: string): Promise<() => Promise<void>> => {
      const trx = await locker.transaction();
      await trx('agent_sessions').where('session_id', id).forUpdate().first();
      return async () => void (await trx.commit());
    };
    const store = new SessionStore(impatient, 'retrying-process');
    const first = await store.admit(request(agentId, 1));
    if (!first.admitted) return t.fail('not admitted');
    const unlock = await lockRow(first.sessionId);
    const failures: boolean[] = [];
    await store.markActive(first.sessionId, (_err, willRetry) => failures.push(willRetry));
    t.deepEqual(failures, [true], 'the first write failed on the lock, and a retry follows');
    t.is(await statusOf(first.sessionId), 'starting');
    await unlock();
    await until(async () => (await statusOf(first.sessionId)) === 'active', { timeoutMs: 10_000, intervalMs: 50, what: 'the retried write marked the session active' });
    t.deepEqual(failures, [true]);

    // Closed while a retry waits: no further write.
    const second = await store.admit(request(agentId, 2));
    if (!second.admitted) return t.fail('not admitted');
    const unlockSecond = await lockRow(second.sessionId);
    await store.markActive(second.sessionId);
    store.close();
    await unlockSecond();
    const firstRetryMs = SESSION_LEASE.activeRetryDelaysMs[0]!;
    await new Promise((resolve) => setTimeout(resolve, firstRetryMs * 3));
    t.is(await statusOf(second.sessionId), 'starting', 'no write after close()');
  } finally {
    await impatient.destroy();
    await locker.destroy();
  }
});

test("one batch with the process's capacity: in arrival order, admitted while both the agent's limit and the capacity leave room; then server_busy while the limit has room, concurrency_limit once it has none; rows only for the admitted", async (t) => {
  const agentId = await publishedAgent({ max_concurrency: 5 });
  const store = new SessionStore(s.server.db, 'p-capacity');
  const first = await store.admit(request(agentId, 0));
  t.true(first.admitted, 'one live session before the batch');

  // Capacity for 2: the limit leaves room for 4, so 2 admitted and the other 6 are server_busy.
  const calls: number[] = [];
  const capacity = (free: number) => {
    let left = free;
    return (i: number) => () => {
      calls.push(i);
      return left-- > 0;
    };
  };
  const twoFree = capacity(2);
  const short = await Promise.all(Array.from({ length: 8 }, (_, i) => store.admit(request(agentId, 10 + i), twoFree(i))));
  t.deepEqual(short.map((r) => (r.admitted ? 'admitted' : r.reason)), ['admitted', 'admitted', ...Array(6).fill('server_busy')]);
  t.deepEqual(calls, [0, 1, 2], 'the capacity is asked in arrival order, up to its first refusal');

  // Capacity for 6: the limit leaves room for 2 (3 live of 5): 2 admitted, the rest concurrency_limit.
  calls.length = 0;
  const sixFree = capacity(6);
  const long = await Promise.all(Array.from({ length: 8 }, (_, i) => store.admit(request(agentId, 20 + i), sixFree(i))));
  t.deepEqual(long.map((r) => (r.admitted ? 'admitted' : r.reason)), ['admitted', 'admitted', ...Array(6).fill('concurrency_limit')]);
  for (const r of long) if (!r.admitted && r.reason === 'concurrency_limit') t.deepEqual([r.live, r.limit], [5, 5]);
  t.deepEqual(calls, [0, 1, 2, 3, 4, 5, 6], 'leases taken in order until the capacity refused (the refused connects give theirs back)');

  const rows = await s.server.db('agent_sessions').where({ agent_id: agentId });
  const callRows = await s.server.db('agent_calls').where({ agent_id: agentId });
  t.is(rows.length, 5, 'a row for each admitted session, none for a refused connect');
  t.is(callRows.length, 5);
  const admittedIds = new Set([first, ...short, ...long].flatMap((r) => (r.admitted ? [r.sessionId] : [])));
  // Sorted: ava compares Sets in insertion order, and the rows come back in no set order.
  t.deepEqual(rows.map((r) => r.session_id).sort(), [...admittedIds].sort());
  t.true(rows.every((r) => r.status === 'starting' && r.runner_id === 'p-capacity' && r.metadata.runner_id === 'p-capacity'));
  t.true(callRows.every((c) => c.status === 'active' && admittedIds.has(c.session_id) && c.client_user_ref?.startsWith('user-')));
});

test('fleet: a placement moved to another runner gets a fresh lease (the first runner\'s start deadline had used the admission\'s)', async (t) => {
  const agentId = await publishedAgent({ max_concurrency: 2 });
  const suffix = randomUUID().slice(0, 8);
  const runners = [`lease-a-${suffix}`, `lease-b-${suffix}`];
  for (const [i, id] of runners.entries()) {
    await s.server.db.raw(`insert into session_runners (runner_id, url, slots, live_sessions, load, state, started_at, heartbeat_at) values (?, ?, ?, 0, '{}'::jsonb, 'ready', now(), now())`, [id, `http://10.9.9.${i + 1}:8090`, 100 - i]);
  }
  t.teardown(() => s.server.db('session_runners').whereIn('runner_id', runners).delete());
  const sessions = new SessionStore(s.server.db, 'api-lease');
  const fleet = new FleetStore(s.server.db, { leaseMs: SESSION_LEASE.leaseMs });
  const admitted = await fleet.admitAndPlace(sessions, request(agentId, 1));
  if (!admitted.admitted || !admitted.placement) return t.fail('not admitted and placed');
  const first = admitted.placement.target.runnerId;
  t.true(runners.includes(first));
  // The first runner's start deadline has run: one second of the lease is left.
  await s.server.db('agent_sessions').where('session_id', admitted.sessionId).update({ lease_expires_at: s.server.db.raw(`now() + interval '1 second'`) });
  const moved = await fleet.movePlacement(admitted.sessionId, first, [first]);
  if ('why' in moved) return t.fail(`not moved: ${moved.why}`);
  t.not(moved.runnerId, first);
  const left = (await s.server.db.raw(`select extract(epoch from (lease_expires_at - now()))::float as s from agent_sessions where session_id = ?`, [admitted.sessionId])).rows[0].s as number;
  t.true(left > SESSION_LEASE.leaseMs / 1000 - 5, `the lease left after the move: ${left.toFixed(1)} s of ${SESSION_LEASE.leaseMs / 1000}`);
});

test('fleet: a failed placement is recorded only while the session still waits on its runner (a runner that claimed it meanwhile owns it)', async (t) => {
  const agentId = await publishedAgent({ max_concurrency: 2 });
  const runner = `claim-late-${randomUUID().slice(0, 8)}`;
  await s.server.db.raw(`insert into session_runners (runner_id, url, slots, live_sessions, load, state, started_at, heartbeat_at) values (?, 'http://10.9.9.9:8090', 4, 0, '{}'::jsonb, 'ready', now(), now())`, [runner]);
  t.teardown(() => s.server.db('session_runners').where('runner_id', runner).delete());
  const sessions = new SessionStore(s.server.db, 'api-claim');
  const fleet = new FleetStore(s.server.db, { leaseMs: SESSION_LEASE.leaseMs });
  const end = { terminationReason: 'bot_start_failed', failureReason: 'runner_unreachable', participantCount: 0, metadata: {} } as const;
  // Claimed by the runner whose answer the API process gave up on: not ended under it.
  const late = await fleet.admitAndPlace(sessions, request(agentId, 1));
  if (!late.admitted || !late.placement) return t.fail('not placed');
  const placedOn = late.placement.target.runnerId; // this runner, or another test's there at the same time
  t.truthy(await fleet.claim(late.sessionId, placedOn, 'embedded'));
  t.false(await sessions.finish(late.sessionId, late.callId, end, { placedOn }));
  t.truthy(await s.server.db('agent_sessions').where('session_id', late.sessionId).first(), 'the runner\'s session row stays');
  t.is((await s.server.db('agent_calls').where('call_id', late.callId).first()).status, 'active');
  // Never claimed: recorded as failed.
  const unclaimed = await fleet.admitAndPlace(sessions, request(agentId, 2));
  if (!unclaimed.admitted || !unclaimed.placement) return t.fail('not placed');
  t.true(await sessions.finish(unclaimed.sessionId, unclaimed.callId, end, { placedOn: unclaimed.placement.target.runnerId }));
  t.like(await s.server.db('agent_calls').where('call_id', unclaimed.callId).first(), { status: 'failed', termination_reason: 'bot_start_failed' });
});

test('fleet: a release nudge goes to the runner row\'s checked origin, never to what else its url says', async (t) => {
  const fleet = new FleetStore(s.server.db, { leaseMs: SESSION_LEASE.leaseMs });
  const rows: Array<[string, string]> = [
    [`runner-url-${randomUUID()}`, 'http://10.9.9.20:8090/some/path?x=1'],
    [`runner-url-${randomUUID()}`, 'file:///etc/passwd'],
    [`runner-url-${randomUUID()}`, 'not a url'],
  ];
  for (const [id, url] of rows) {
    await s.server.db.raw(`insert into session_runners (runner_id, url, slots, live_sessions, load, state, started_at, heartbeat_at) values (?, ?, 1, 0, '{}'::jsonb, 'ready', now(), now())`, [id, url]);
  }
  t.teardown(() => s.server.db('session_runners').whereIn('runner_id', rows.map(([id]) => id)).delete());
  t.deepEqual(await Promise.all(rows.map(([id]) => fleet.runnerUrl(id))), ['http://10.9.9.20:8090', null, null]);
  t.is(await fleet.runnerUrl('no-such-runner'), null);
});
