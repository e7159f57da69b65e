import test, { type ExecutionContext } from 'ava';
import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { closeDatabase, openDatabase, openEmbeddedClient, type Db } from '../../server/db/connect.ts';
import { migrateToLatest, pendingMigrations } from '../../server/db/migrate.ts';
import { pgliteSocketDir, servePgliteSocket, type PgliteSocketServer } from '../../server/db/pglite-socket.ts';
import { seedPgliteDir } from '../support/pglite-template.ts';

/** A PGlite directory opened and served the way `npm start` does, removed when the test ends. */
async function served(t: ExecutionContext, options: { idleInTransactionMs?: number } = {}): Promise<{ db: Db; dir: string; socket: PgliteSocketServer }> {
  const root = mkdtempSync(join(tmpdir(), 'svc-sock-'));
  const dir = join(root, 'pglite');
  await seedPgliteDir(dir); // an empty database, as initdb makes it (the creation is not what these tests are about)
  const db = openDatabase({ pgliteDir: dir });
  const socket = await servePgliteSocket(db, dir, options);
  t.teardown(async () => {
    await socket.close();
    await closeDatabase(db);
    rmSync(root, { recursive: true, force: true });
  });
  return { db, dir, socket };
}

async function client(t: ExecutionContext, dir: string): Promise<pg.Client> {
  const c = new pg.Client({ host: pgliteSocketDir(dir), port: 5432, user: 'anyone', database: 'any' });
  c.on('error', () => undefined); // a connection the server ends: the test looks at the query's error
  await c.connect();
  t.teardown(() => c.end().catch(() => undefined));
  return c;
}

test.serial('the same migrations run through the socket; the server process sees their tables', async (t) => {
  const { db, dir } = await served(t);
  const { db: remote, via } = await openEmbeddedClient(dir);
  try {
    t.is(via, 'server');
    await migrateToLatest(remote);
    t.deepEqual(await pendingMigrations(db), [], 'applied in the one database, seen by its owner');
    t.deepEqual(await pendingMigrations(remote), []);
  } finally {
    await closeDatabase(remote);
  }
});

test.serial('one transaction at a time: a second client and the server itself wait until the first commits', async (t) => {
  const { db, dir } = await served(t);
  await db.raw('create table t (n int)');
  const a = await client(t, dir);
  const b = await client(t, dir);
  const order: string[] = [];
  await a.query('begin');
  await a.query('insert into t values (1)');
  const bRead = b.query('select count(*)::int as n from t').then((r) => {
    order.push('b read');
    return r.rows[0].n as number;
  });
  const serverRead = db.raw('select count(*)::int as n from t').then((r: { rows: { n: number }[] }) => {
    order.push('server read');
    return r.rows[0]!.n;
  });
  // The readers have sent their queries; whatever the machine's speed, they cannot run inside A's transaction.
  await a.query('insert into t values (2)');
  order.push('a commit');
  await a.query('commit');
  t.is(await bRead, 2, 'B saw the committed rows, never a half of the transaction');
  t.is(await serverRead, 2);
  t.is(order[0], 'a commit');
  t.deepEqual(order.slice(1).sort(), ['b read', 'server read']);
});

test.serial('a failed transaction stays the client\'s until it rolls back; errors keep their SQLSTATE; the connection stays usable', async (t) => {
  const { db, dir } = await served(t);
  const a = await client(t, dir);
  const syntax = await t.throwsAsync(a.query('selec 1'));
  t.is((syntax as { code?: string }).code, '42601');
  await a.query('begin');
  const missing = await t.throwsAsync(a.query('select * from no_such_table'));
  t.is((missing as { code?: string }).code, '42P01');
  const aborted = await t.throwsAsync(a.query('select 1'));
  t.is((aborted as { code?: string }).code, '25P02', 'still in the failed transaction');
  await a.query('rollback');
  t.deepEqual((await a.query('select $1::int + 1 as n', [41])).rows, [{ n: 42 }], 'parameters (extended protocol) work');
  t.is((await db.raw('select 1 as one')).rows[0].one, 1, 'the server is not left inside the client\'s transaction');
});

test.serial('session settings do not outlive a client transaction: the server keeps its search_path', async (t) => {
  const { db, dir } = await served(t);
  await db.raw('create table visible (n int)');
  const a = await client(t, dir);
  await a.query('create schema elsewhere');
  await a.query('set search_path to elsewhere');
  t.is((await db.raw('select count(*)::int as n from visible')).rows[0].n, 0, 'the server still finds its tables');
  t.is((await a.query('show search_path')).rows[0].search_path, 'public', 'settings are reset after each transaction (docs/operations.md)');
});

test.serial('a client that dies or falls silent inside a transaction is rolled back and the others go on', async (t) => {
  const { db, dir } = await served(t, { idleInTransactionMs: 200 });
  await db.raw('create table t (n int)');
  const dying = await client(t, dir);
  // One message (simple query protocol), so that even a slow machine cannot make the client look silent between them.
  await dying.query('begin; insert into t values (1)');
  const waiting = db.raw('select count(*)::int as n from t');
  (dying as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
  t.is((await waiting).rows[0].n, 0, 'the dead client\'s insert was rolled back');

  const silent = await client(t, dir);
  await silent.query('begin; insert into t values (2)');
  const other = await client(t, dir);
  t.is((await other.query('select count(*)::int as n from t')).rows[0].n, 0, 'the silent client was disconnected and rolled back');
  const ended = await t.throwsAsync(silent.query('commit'));
  t.truthy(ended, 'the silent client learns its connection is gone');
});

test.serial('garbage on the socket closes that connection only; SSL is refused, plain connections go on', async (t) => {
  const { db, dir, socket } = await served(t);
  const reply = await new Promise<Buffer>((resolve) => {
    const raw = connect(socket.path);
    let got = Buffer.alloc(0);
    raw.on('data', (d) => (got = Buffer.concat([got, d])));
    raw.on('close', () => resolve(got));
    raw.on('error', () => undefined);
    raw.write(Buffer.from([0x7f, 0xff, 0xff, 0xff, 1, 2, 3, 4]));
  });
  t.is(String.fromCharCode(reply[0]!), 'E', 'an ErrorResponse, then the connection is closed');
  t.regex(reply.toString('latin1'), /invalid startup packet/);
  const ssl = new pg.Client({ host: pgliteSocketDir(dir), port: 5432, user: 'x', database: 'x', ssl: { rejectUnauthorized: false } });
  ssl.on('error', () => undefined);
  await t.throwsAsync(ssl.connect(), { message: /does not support SSL/ });
  const a = await client(t, dir);
  t.is((await a.query('select 1 as one')).rows[0].one, 1);
  t.is((await db.raw('select 1 as one')).rows[0].one, 1);
});

test.serial('only this OS user can use the socket: the folder is 0700, the socket 0600, and another user is refused', async (t) => {
  const { dir, socket } = await served(t);
  t.is(statSync(pgliteSocketDir(dir)).mode & 0o777, 0o700);
  t.is(statSync(socket.path).mode & 0o777, 0o600);
  t.true(statSync(socket.path).isSocket(), 'a Unix socket, no network port');
  if (process.getuid?.() !== 0) {
    t.log('not root: cannot run a process as another user here; the modes above are what refuses them');
    return;
  }
  // Root may run a process as `nobody`; the data directory is made traversable so that only the
  // socket's own folder and mode stand in the way.
  chmodSync(join(dir, '..'), 0o755);
  chmodSync(dir, 0o755);
  const result = await new Promise<string>((resolve) => {
    const child = spawn(process.execPath, ['-e', `require('net').connect(${JSON.stringify(socket.path)}).on('connect',()=>{console.log('connected');process.exit(0)}).on('error',(e)=>{console.log(e.code);process.exit(0)})`], { uid: 65534, gid: 65534 });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.on('close', () => resolve(out.trim()));
  });
  t.is(result, 'EACCES');
  await socket.close();
  t.false(existsSync(socket.path), 'a server closing (SIGTERM) removes its socket');
});

test.serial('a socket left by a killed server is passed over: the client opens the directory itself', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'svc-sock-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const dir = join(root, 'pglite');
  await seedPgliteDir(dir);
  const db = openDatabase({ pgliteDir: dir });
  await migrateToLatest(db);
  await closeDatabase(db);
  // What kill -9 leaves: a socket file nobody listens on (the stale lock is test/server/cli.test.ts's real kill -9).
  mkdirSync(pgliteSocketDir(dir), { mode: 0o700 });
  const path = join(pgliteSocketDir(dir), '.s.PGSQL.5432');
  const child = spawn(process.execPath, ['-e', `require('net').createServer().listen(${JSON.stringify(path)}, () => console.log('up'))`], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve) => child.stdout.once('data', () => resolve()));
  child.kill('SIGKILL');
  await new Promise((resolve) => child.once('exit', resolve));
  t.true(statSync(path).isSocket(), 'the dead listener\'s socket file is still there');
  const opened = await openEmbeddedClient(dir);
  try {
    t.is(opened.via, 'directory');
    t.deepEqual(await pendingMigrations(opened.db), []);
  } finally {
    await closeDatabase(opened.db);
  }
  // A server started on it afterwards replaces the dead socket.
  const again = openDatabase({ pgliteDir: dir });
  const socket = await servePgliteSocket(again, dir);
  try {
    const via = await openEmbeddedClient(dir);
    t.is(via.via, 'server');
    await closeDatabase(via.db);
  } finally {
    await socket.close();
    await closeDatabase(again);
  }
});
