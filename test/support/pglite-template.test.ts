import test from 'ava';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { closeDatabase, openDatabase } from '../../server/db/connect.ts';
import { migrateToLatest, pendingMigrations } from '../../server/db/migrate.ts';
import { pgliteTemplate, seedPgliteDir } from './pglite-template.ts';

test('a seeded folder is an empty embedded database: no table of ours until migrated, then every migration applied; the template is left as it was', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'svc-seed-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const dir = join(root, 'pglite');
  await seedPgliteDir(dir);
  t.true(existsSync(join(dir, 'PG_VERSION')));
  t.false(existsSync(join(dir, 'svc.lock')), 'no lock copied from the template');
  const db = openDatabase({ pgliteDir: dir });
  try {
    const tables = await db.raw(`select count(*)::int as n from information_schema.tables where table_schema = 'public'`);
    t.is(tables.rows[0].n, 0, 'not even knex_migrations');
    await migrateToLatest(db);
    t.deepEqual(await pendingMigrations(db), []);
  } finally {
    await closeDatabase(db);
  }
  // The copy was migrated, not the template: the next seed is empty again.
  const second = join(root, 'second');
  await seedPgliteDir(second);
  const again = openDatabase({ pgliteDir: second });
  try {
    const tables = await again.raw(`select count(*)::int as n from information_schema.tables where table_schema = 'public'`);
    t.is(tables.rows[0].n, 0);
  } finally {
    await closeDatabase(again);
  }
  t.false(existsSync(join(await pgliteTemplate(), 'svc.lock')));
});

test('seeding a folder that exists is refused (a test would otherwise mix two databases)', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'svc-seed-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  await t.throwsAsync(seedPgliteDir(root), { message: /exists already/ });
});
