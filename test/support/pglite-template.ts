/**
 * A new embedded (PGlite) database folder for a test, copied from a template instead of made by
 * initdb: PGlite's initdb (WebAssembly) takes 3-9 s on the 2-core machine, opening a copy about
 * 1 s, and dozens of tests each need an empty database of their own. The template is an initdb'd
 * cluster with nothing in it (no migrations: the test's server or CLI runs them as on a first
 * start), made once per machine and PGlite version under node_modules/.cache (a fresh `npm ci`
 * removes it). Tests of the creation itself (the first `npm start`, `svc keys create --create`)
 * do not use it.
 */
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { closeDatabase, openDatabase } from '../../server/db/connect.ts';

const ROOT = join(import.meta.dirname, '..', '..');
const PGLITE_VERSION = (JSON.parse(readFileSync(join(ROOT, 'node_modules', '@electric-sql', 'pglite', 'package.json'), 'utf8')) as { version: string }).version;
const CACHE = join(ROOT, 'node_modules', '.cache', 'svc-test');
const TEMPLATE = join(CACHE, `pglite-${PGLITE_VERSION}`);

let making: Promise<string> | undefined;

/** The template folder, made on first use (by whichever test process gets there first). */
export function pgliteTemplate(): Promise<string> {
  making ??= (async () => {
    if (existsSync(join(TEMPLATE, 'PG_VERSION'))) return TEMPLATE;
    mkdirSync(CACHE, { recursive: true });
    // Made beside it and renamed into place: another process making it at the same time, or one
    // killed half way, never leaves a half-made template where it is looked for.
    const scratch = mkdtempSync(join(CACHE, 'pglite-making-'));
    const dir = join(scratch, 'pglite');
    const db = openDatabase({ pgliteDir: dir });
    try {
      await db.raw('select 1');
    } finally {
      await closeDatabase(db);
    }
    rmSync(join(dir, 'svc.lock'), { force: true }); // closeDatabase removed it; never copied into a test's folder
    try {
      renameSync(dir, TEMPLATE);
    } catch (err) {
      if (!existsSync(join(TEMPLATE, 'PG_VERSION'))) throw err; // not a lost race
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
    return TEMPLATE;
  })();
  // A failed attempt (a full disk, say) is not remembered: the next test tries again.
  making.catch(() => (making = undefined));
  return making;
}

/**
 * Puts an empty embedded database at `dir` (the folder `openDatabase({ pgliteDir })` or a
 * server's `SVC_DATA_DIR/pglite` uses). `dir` must not exist yet.
 */
export async function seedPgliteDir(dir: string): Promise<void> {
  if (existsSync(dir)) throw new Error(`seedPgliteDir: ${dir} exists already`);
  cpSync(await pgliteTemplate(), dir, { recursive: true });
}
