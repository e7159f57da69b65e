/**
 * The queue of statements waiting for a connection held out of knex's pool
 * (server/db/held-connections.ts, used by preparedQuery), on real PostgreSQL: first come first
 * served through few held connections, the other half of the pool free meanwhile, a failed
 * statement's connection replaced for those waiting, the wait bounded by knex's
 * acquireConnectionTimeout with knex's own error, and a destroyed pool rejecting the waiters and
 * leaving no connection open.
 */
import test from 'ava';
import pg from 'pg';
import { isDatabaseUnavailable, openDatabase, type Db } from '../../server/db/connect.ts';
import { HeldConnections } from '../../server/db/held-connections.ts';
import { preparedQuery } from '../../server/db/prepared-query.ts';
import { until } from '../../testing/until.ts';

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** A pool whose connections carry a label of their own in pg_stat_activity. */
function open(label: string, poolMax: number, acquireTimeoutMs?: number): Db {
  const url = new URL(DATABASE_URL);
  url.searchParams.set('application_name', label);
  return openDatabase({ databaseUrl: url.toString(), pgliteDir: '', poolMax, ...(acquireTimeoutMs ? { timeouts: { acquireTimeoutMs } } : {}) });
}

async function connectionsLabelled(label: string, state?: 'active'): Promise<number> {
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  try {
    const { rows } = await admin.query('select count(*)::int as n from pg_stat_activity where application_name = $1 and ($2::text is null or state = $2)', [label, state ?? null]);
    return rows[0].n as number;
  } finally {
    await admin.end();
  }
}

const label = (name: string) => `held_${name}_${process.pid}_${Date.now()}`;
const numbered = (db: Db, n: number) => preparedQuery(db, 'held_test.numbered', 'select ?::int as n, pg_backend_pid() as pid', [n]);

test('30 statements through one held connection all complete, in order of arrival, on that one connection', async (t) => {
  const db = open(label('order'), 2); // 1 held
  try {
    const done: number[] = [];
    const pids = new Set<number>();
    const all = Array.from({ length: 30 }, (_, i) =>
      numbered(db, i).then((rows) => {
        t.is(rows[0].n, i);
        pids.add(rows[0].pid);
        done.push(i);
      }),
    );
    t.is(HeldConnections.of(db)!.queued, 29, 'the first took the connection, the others wait');
    await Promise.all(all);
    t.deepEqual(done, Array.from({ length: 30 }, (_, i) => i));
    t.is(pids.size, 1);
    t.is(HeldConnections.of(db)!.queued, 0);
  } finally {
    await db.destroy();
  }
});

test('200 statements through 3 held connections of a pool of 6: all complete, never more than 3 connections, the other half free for other queries', async (t) => {
  const db = open(label('many'), 6); // 3 held
  // The held connections' first statements wait on an advisory lock the test holds, so the queue
  // cannot drain while the other query runs: on a fast machine 200 trivial statements finished
  // before a transaction had opened its connection, and "the other query did not wait for the
  // queue" could not be seen (local CI run P).
  const blocker = new pg.Client({ connectionString: DATABASE_URL });
  await blocker.connect();
  const key = Math.floor(Math.random() * 2 ** 31);
  await blocker.query('select pg_advisory_lock($1::bigint)', [key]);
  let locked = true;
  try {
    const gates = Array.from({ length: 3 }, () => preparedQuery(db, 'held_test.gate', 'select pg_advisory_lock_shared(?::bigint), pg_advisory_unlock_shared(?::bigint)', [key, key]));
    const pids = new Set<number>();
    const all = Array.from({ length: 200 }, (_, i) =>
      numbered(db, i).then((rows) => {
        t.is(rows[0].n, i);
        pids.add(rows[0].pid);
      }),
    );
    t.true(HeldConnections.of(db)!.queued >= 200);
    // Transactions and ordinary queries take the pool's other half meanwhile.
    const other = await db.transaction(async (trx) => (await trx.raw('select 7 as n')).rows[0].n);
    t.is(other, 7);
    t.true(HeldConnections.of(db)!.queued >= 200, 'the other query did not wait for the queue');
    await blocker.query('select pg_advisory_unlock($1::bigint)', [key]);
    locked = false;
    await Promise.all([...gates, ...all]);
    t.true(pids.size <= 3, `${pids.size} connections`);
  } finally {
    if (locked) await blocker.query('select pg_advisory_unlock($1::bigint)', [key]).catch(() => undefined);
    await blocker.end();
    await db.destroy();
  }
});

test('a failed statement gives its connection back and the statements waiting behind it run on a new one', async (t) => {
  const db = open(label('failed'), 2); // 1 held
  try {
    const failing = preparedQuery(db, 'held_test.div', 'select 1 / ?::int as n', [0]);
    const after = Array.from({ length: 5 }, (_, i) => numbered(db, i));
    await t.throwsAsync(failing, { message: /division by zero/ });
    t.deepEqual((await Promise.all(after)).map((rows) => rows[0].n), [0, 1, 2, 3, 4]);
  } finally {
    await db.destroy();
  }
});

test('a statement waiting past acquireConnectionTimeout fails with the error of knex`s own acquire, and later ones still run', async (t) => {
  const db = open(label('timeout'), 2, 500); // 1 held, 500 ms to acquire
  try {
    // Both connections opened first: on a loaded machine opening one can take longer than the timeout.
    await Promise.all([numbered(db, 0), db.raw('select pg_sleep(0.05)')]);
    const busy = preparedQuery(db, 'held_test.sleep', 'select pg_sleep(?::float) as slept', [2.5]);
    let busyDone = false;
    void busy.then(() => (busyDone = true), () => undefined);
    const started = Date.now();
    const waiting = numbered(db, 1);
    const queued = await t.throwsAsync(waiting);
    const waited = Date.now() - started;
    // Failed by its timeout (not before it), while the statement holding the connection still
    // ran: not after waiting it out. (Was a real-time upper bound, 2.3 s, that a stall could pass.)
    t.true(waited >= 450, `failed after ${waited} ms`);
    t.false(busyDone, `failed after ${waited} ms, before the 2.5 s statement holding the connection finished`);
    // knex's own path: the pool's other connection taken by a transaction, an ordinary query waits.
    const viaKnex = await db.transaction(async () => t.throwsAsync(db.raw('select 1')));
    t.is(queued!.name, 'KnexTimeoutError');
    t.is(queued!.name, viaKnex!.name);
    t.is(queued!.message, viaKnex!.message);
    t.true(isDatabaseUnavailable(queued), 'answered 503 as a full pool is');
    await busy;
    t.is((await numbered(db, 2))[0].n, 2);
  } finally {
    await db.destroy();
  }
});

test('destroying the pool rejects the waiting statements, lets the running one finish and leaves no connection', async (t) => {
  const name = label('destroy');
  const db = open(name, 2); // 1 held
  const running = preparedQuery(db, 'held_test.sleep', 'select pg_sleep(?::float) as slept', [0.3]);
  const waiting = Array.from({ length: 5 }, (_, i) => numbered(db, i));
  await until(async () => (await connectionsLabelled(name, 'active')) === 1, { what: 'the running statement on the held connection' });
  const destroyed = db.destroy();
  for (const w of waiting) {
    const err = await t.throwsAsync(w);
    t.regex(err!.message, /Unable to acquire a connection/);
    t.true(isDatabaseUnavailable(err));
  }
  t.deepEqual(await running, [{ slept: '' }]);
  await destroyed;
  await until(async () => (await connectionsLabelled(name)) === 0, { what: 'no connection of the destroyed pool' });
  t.pass();
});
