/**
 * The pool's kept connections (server/db/connect.ts, `DATABASE_DEFAULTS.poolMin`, issue 25): opened
 * at start by `warmPool`, each having run a query, before any request needs one; bounded by a
 * smaller pool's maximum; none on PGlite; all closed with the database.
 */
import test from 'ava';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { closeDatabase, DATABASE_DEFAULTS, openDatabase, warmPool } from '../../server/db/connect.ts';

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

async function connectionsLabelled(label: string): Promise<{ total: number; queried: number }> {
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  try {
    const { rows } = await admin.query("select count(*)::int as total, count(*) filter (where query = 'select 1')::int as queried from pg_stat_activity where application_name = $1", [label]);
    return rows[0] as { total: number; queried: number };
  } finally {
    await admin.end();
  }
}

function labelled(label: string): string {
  const url = new URL(DATABASE_URL);
  url.searchParams.set('application_name', label);
  return url.toString();
}

test('warmPool opens the kept connections at once, each with a query run; closing the database closes them', async (t) => {
  const label = `warm_${process.pid}_${Date.now()}`;
  const db = openDatabase({ databaseUrl: labelled(label), pgliteDir: '' });
  try {
    t.deepEqual(await connectionsLabelled(label), { total: 0, queried: 0 }, 'knex opens none by itself');
    t.is(await warmPool(db), DATABASE_DEFAULTS.poolMin);
    t.deepEqual(await connectionsLabelled(label), { total: DATABASE_DEFAULTS.poolMin, queried: DATABASE_DEFAULTS.poolMin });
    // The next statements use them: no connection is added for a few at once.
    await Promise.all(Array.from({ length: DATABASE_DEFAULTS.poolMin }, () => db.raw('select pg_sleep(0.05)')));
    t.is((await connectionsLabelled(label)).total, DATABASE_DEFAULTS.poolMin);
  } finally {
    await closeDatabase(db);
  }
  t.is((await connectionsLabelled(label)).total, 0, 'none left open');
});

test('a pool smaller than the kept count keeps its maximum; PGlite opens nothing more', async (t) => {
  const label = `warm_small_${process.pid}_${Date.now()}`;
  const db = openDatabase({ databaseUrl: labelled(label), pgliteDir: '', poolMax: 2 });
  try {
    t.is(await warmPool(db), 2);
    t.is((await connectionsLabelled(label)).total, 2);
  } finally {
    await closeDatabase(db);
  }
  const dir = mkdtempSync(join(tmpdir(), 'svc-warm-pglite-'));
  const embedded = openDatabase({ pgliteDir: dir });
  try {
    t.is(await warmPool(embedded), 0);
    t.is(Number((await embedded.raw('select 1 as n')).rows[0].n), 1, 'and the database still answers');
  } finally {
    await closeDatabase(embedded);
    rmSync(dir, { recursive: true, force: true });
  }
});
