/**
 * The server's data is its user's only (issue 32, High 3): in an SVC_DATA_DIR created under the
 * default umask, the embedded database (PGlite) left 968 of 972 files 0666 in 0755 folders,
 * the WAL included, and stored objects 0644. Checked with real files and a real second user
 * (`nobody`, through a child process), not only with mode bits.
 */
import test from 'ava';
import { spawnSync } from 'node:child_process';
import { chmodSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { Registry } from '../../core/registry.ts';
import { resolveConfig } from '../../server/config/server-config.ts';
import { openServices } from '../../server/services/open-services.ts';
import { makePrivate, PrivateFilesError } from '../../server/security/private-files.ts';
import { SECRETS } from './harness.ts';

/** Every path under `dir` (itself included) whose mode gives anything to group or others. */
function openToOthers(dir: string): string[] {
  const found: string[] = [];
  const visit = (path: string) => {
    const stat = lstatSync(path);
    if (stat.isSymbolicLink()) return;
    if ((stat.mode & 0o077) !== 0) found.push(`${(stat.mode & 0o777).toString(8)} ${path}`);
    if (stat.isDirectory()) for (const name of readdirSync(path)) visit(join(path, name));
  };
  visit(dir);
  return found;
}

/** An SVC_DATA_DIR as `mkdir` makes it under the usual umask 022. */
function dataDirLikeMkdir(t: import('ava').ExecutionContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-private-'));
  chmodSync(dir, 0o755);
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function capturingLogger() {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { logger: pino({ level: 'info' }, stream), lines };
}

/** What a server opens first (database, storage, services): where the data directory is checked. */
const start = (dataDir: string, logger = pino({ level: 'silent' })) => openServices(resolveConfig({ ...SECRETS, dataDir }), new Registry(), logger);

/** A user other than the server's reads a file (as the local user did). */
function readsAsNobody(path: string): boolean {
  return spawnSync('cat', [path], { uid: 65534, gid: 65534, stdio: 'ignore' }).status === 0;
}

test.serial('a fresh embedded database and its stored objects are the server user\'s only: another user reads nothing', async (t) => {
  const dataDir = dataDirLikeMkdir(t);
  const server = await start(dataDir);
  await server.storage.putObject('private/probe.txt', Buffer.from('client_user_ref=someone'), 'text/plain');
  await server.close();
  const wal = readdirSync(join(dataDir, 'pglite', 'pg_wal')).find((name) => /^[0-9A-F]{24}$/.test(name));
  t.truthy(wal, 'the WAL exists');
  t.deepEqual(openToOthers(dataDir), [], 'folders 0700, files 0600');
  t.false(readsAsNobody(join(dataDir, 'pglite', 'pg_wal', wal!)), 'the WAL is not readable by another user');
  t.is(statSync(dataDir).mode & 0o777, 0o700);
});

test.serial('modes widened since the last run are fixed at start-up, and one log line says so', async (t) => {
  const dataDir = dataDirLikeMkdir(t);
  await (await start(dataDir)).close();
  // As an older version (or a careless copy) left them.
  spawnSync('chmod', ['-R', 'go+rwX', dataDir]);
  const widened = openToOthers(dataDir).length;
  t.true(widened > 900, `${widened} paths widened`);
  const { logger, lines } = capturingLogger();
  const server = await start(dataDir, logger);
  const warnings = lines.filter((l) => /open to other users: made private/.test(String(l.msg)));
  t.is(warnings.length, 1, 'one line');
  t.true(Number(warnings[0]!.fixed) >= 3, 'SVC_DATA_DIR, the database folder and the storage root at least');
  t.truthy((await server.services.apiKeys.create('org-a', 'after the fix')).key, 'the database works after the fix');
  await server.close();
  t.deepEqual(openToOthers(dataDir), []);
});

test('a path the server cannot make private stops it with the path named', (t) => {
  // /proc/sys/kernel is 0555 and even root cannot chmod it: a stand-in for a folder of another user.
  const error = t.throws(() => makePrivate('/proc/sys/kernel', { recursive: false }), { instanceOf: PrivateFilesError });
  t.regex(error!.message, /\/proc\/sys\/kernel is readable or writable by other users and could not be made private/);
});

test('makePrivate creates a missing folder 0700 and leaves symbolic links alone', (t) => {
  const base = mkdtempSync(join(tmpdir(), 'svc-private-unit-'));
  t.teardown(() => rmSync(base, { recursive: true, force: true }));
  const dir = join(base, 'a', 'b');
  t.deepEqual(makePrivate(dir, { recursive: true }).fixed, []);
  t.is(statSync(dir).mode & 0o777, 0o700);
  mkdirSync(join(dir, 'c'), { mode: 0o755 });
  chmodSync(join(dir, 'c'), 0o755);
  spawnSync('ln', ['-s', '/etc', join(dir, 'link')]);
  t.deepEqual(makePrivate(dir, { recursive: true }).fixed, [join(dir, 'c')]);
  t.is(statSync('/etc').mode & 0o777, 0o755, 'the link target is untouched');
});
