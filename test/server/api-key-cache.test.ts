import test from 'ava';
import pg from 'pg';
import { closeDatabase, openDatabase, type Db } from '../../server/db/connect.ts';
import { migrateToLatest } from '../../server/db/migrate.ts';
import { ApiKeys } from '../../server/services/api-keys.ts';
import { until } from '../../testing/until.ts';
import { createTestDatabase } from './harness.ts';

/** Resolves once `count` backends of this database wait on a lock (pg_stat_activity, read outside any transaction); fails after 15 s. */
async function waitForLockWaiters(admin: pg.Client, database: string, count: number): Promise<void> {
  await until(async () => {
    const { rows } = await admin.query(
      "select count(*)::int as n from pg_stat_activity where datname = $1 and wait_event_type = 'Lock'",
      [database],
    );
    return rows[0].n >= count;
  }, { timeoutMs: 15_000, intervalMs: 10, what: `${count} backends of ${database} waiting on a lock` });
}

/**
 * A migrated database of its own with `ApiKeys` on it, a `blocker` connection to hold tables and a
 * `watcher` to count what waits on them; everything closed and dropped after `run`.
 */
async function withKeys(label: string, run: (f: { db: Db; keys: ApiKeys; blocker: pg.Client; watcher: pg.Client; dbName: string }) => Promise<void>): Promise<void> {
  const database = await createTestDatabase(label);
  const db = openDatabase({ databaseUrl: database.url, pgliteDir: '' });
  const blocker = new pg.Client({ connectionString: database.url });
  const watcher = new pg.Client({ connectionString: database.url });
  try {
    await migrateToLatest(db);
    await blocker.connect();
    await watcher.connect();
    await run({ db, keys: new ApiKeys(db), blocker, watcher, dbName: new URL(database.url).pathname.slice(1) });
  } finally {
    await blocker.end().catch(() => undefined);
    await watcher.end().catch(() => undefined);
    await closeDatabase(db);
    await database.drop();
  }
}

test('a lookup in flight while its key is revoked does not put the revoked key back into the cache', async (t) => {
  await withKeys('keycache', async ({ keys, blocker, watcher, dbName }) => {
    const created = await keys.create('org-cache', 'race');
    t.truthy(await keys.authenticateCached(created.key), 'the key works');
    keys.invalidate(); // start from an empty cache: the next lookup must go to the database

    // Hold the table so the lookup and the revocation queue up behind it in that order.
    await blocker.query('begin');
    await blocker.query('lock table api_keys in access exclusive mode');
    const lookup = keys.authenticateCached(created.key);
    await waitForLockWaiters(watcher, dbName, 1);
    const revocation = keys.revoke(created.api_key_id);
    await waitForLockWaiters(watcher, dbName, 2);
    await blocker.query('commit');

    await lookup; // started before the revocation: may still see the key as active
    t.true(await revocation);
    t.is(await keys.authenticateCached(created.key), null, 'once revoke() returned, the key is refused');
    t.is(await keys.authenticate(created.key), null);
  });
});

test('successful lookups are cached; a revocation in this process takes effect at once', async (t) => {
  await withKeys('keycache2', async ({ db, keys }) => {
    const a = await keys.create('org-cache', 'a');
    const b = await keys.create('org-cache', 'b');
    const first = await keys.authenticateCached(a.key);
    t.is(first?.createdBy, `api_key:${a.api_key_id}`);
    // Revoked behind the service's back (as another process would): the cached entry still
    // answers until it expires, which is what makes the cache a cache.
    await db('api_keys').where('api_key_id', a.api_key_id).update({ revoked_at: db.fn.now() });
    t.deepEqual(await keys.authenticateCached(a.key), first);
    t.is(await keys.authenticate(a.key), null, 'the uncached path reads the database');
    t.truthy(await keys.authenticateCached(b.key));
    t.true(await keys.revoke(b.api_key_id));
    t.is(await keys.authenticateCached(b.key), null);
    t.is(await keys.authenticateCached(a.key), null, 'a revocation clears every cached key');
    t.is(await keys.authenticateCached('svc_not-a-key'), null);
  });
});

test('concurrent lookups of a key that is not cached send one query (no stampede when an entry expires under load)', async (t) => {
  await withKeys('keycache3', async ({ db, keys, blocker, watcher, dbName }) => {
    const created = await keys.create('org-cache3', 'burst');
    // The table held: every lookup sent now waits in the database, where it can be counted.
    await blocker.query('begin');
    await blocker.query('lock table api_keys in access exclusive mode');
    const lookups = Array.from({ length: 20 }, () => keys.authenticateCached(created.key));
    await waitForLockWaiters(watcher, dbName, 1);
    const pool = (db.client as unknown as { pool: { numUsed(): number; numPendingAcquires(): number; numPendingCreates(): number } }).pool;
    t.is(pool.numUsed() + pool.numPendingAcquires() + pool.numPendingCreates(), 1, 'one connection asked for, by one query');
    await blocker.query('commit');
    const principals = await Promise.all(lookups);
    t.true(principals.every((p) => p?.apiKeyId === created.api_key_id), 'every caller gets the answer');
  });
});
