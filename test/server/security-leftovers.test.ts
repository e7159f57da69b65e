import test from 'ava';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Registry } from '../../core/registry.ts';
import { createServer } from '../../server/build-server.ts';
import { PgliteLock } from '../../server/db/pglite-lock.ts';
import { createTestDatabase, SECRETS, testFacePlugin } from './harness.ts';

// Issue 17 item 10: crash leftovers are swept at start-up (only stale ones); the PGlite lock is
// taken atomically and tells a live owner from a reused pid.

const HOUR = 60 * 60 * 1000;
const longAgo = new Date(Date.now() - 3 * HOUR);
const children: ChildProcess[] = [];
test.after.always(() => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
});

function startTime(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]!;
}

/** A live process that is not us (a sleeping child), for "someone else's pid". */
async function liveChild(): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60000)'], { stdio: 'ignore' });
  children.push(child);
  await new Promise((resolve) => child.once('spawn', resolve));
  return child;
}

test('start-up removes stale half-assembled objects and idle-video work folders, and keeps live or recent ones', async (t) => {
  const db = await createTestDatabase('sec_leftovers');
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-sec-leftovers-'));
  const objects = join(dataDir, 'objects', 'objects');
  mkdirSync(objects, { recursive: true });
  const me = `${process.pid}_${startTime(process.pid)}`;
  const files = {
    reusedPid: `a2V5.${process.pid}_1.0a0a0a.assembling`, // our pid, another start time: its owner died
    deadPid: `a2V5.4194303999_7.0b0b0b.assembling`, // no such process
    legacy: `a2V5.0c0c0c0c0c0c.assembling`, // named before owners were recorded
    liveOwner: `a2V5.${me}.0d0d0d.assembling`, // a process that is still running (this one)
    recent: `a2V5.4194303999_7.0e0e0e.assembling`, // dead owner, but too recent to judge
    object: 'a2V5', // a stored object: never touched
  };
  for (const [name, file] of Object.entries(files)) {
    writeFileSync(join(objects, file), 'x');
    if (name !== 'recent') utimesSync(join(objects, file), longAgo, longAgo);
  }
  const tag = Math.random().toString(36).slice(2, 8);
  const work = (name: string, entries: Record<string, string>) => {
    const dir = join(tmpdir(), `svc-idle-${tag}${name}`);
    mkdirSync(dir);
    for (const [entry, content] of Object.entries(entries)) writeFileSync(join(dir, entry), content);
    utimesSync(dir, longAgo, longAgo);
    return dir;
  };
  const dirs = {
    deadOwner: work('dead', { owner: '4194303999:7', 'idle.mp4': 'x' }),
    reusedPid: work('reused', { owner: `${process.pid}:1` }),
    legacy: work('legacy', { 'idle.mp4': 'x' }),
    liveOwner: work('live', { owner: `${process.pid}:${startTime(process.pid)}` }),
    notOurs: work('other', { 'something-else.db': 'x' }), // an ownerless folder with foreign content
  };
  const server = await createServer({ ...SECRETS, port: 0, host: '127.0.0.1', logLevel: 'silent', dataDir, databaseUrl: db.url }, { registry: new Registry().use(testFacePlugin) });
  try {
    t.false(existsSync(join(objects, files.reusedPid)), 'owner pid reused by another process');
    t.false(existsSync(join(objects, files.deadPid)), 'owner gone');
    t.false(existsSync(join(objects, files.legacy)), 'legacy name');
    t.true(existsSync(join(objects, files.liveOwner)), 'a live owner keeps its file');
    t.true(existsSync(join(objects, files.recent)), 'recent files are kept');
    t.true(existsSync(join(objects, files.object)), 'objects are never touched');
    t.false(existsSync(dirs.deadOwner));
    t.false(existsSync(dirs.reusedPid));
    t.false(existsSync(dirs.legacy));
    t.true(existsSync(dirs.liveOwner));
    t.true(existsSync(dirs.notOurs));
  } finally {
    await server.close();
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
    for (const dir of Object.values(dirs)) rmSync(dir, { recursive: true, force: true });
  }
});

test('a PGlite lock naming a pid now used by an unrelated process is taken over', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-sec-lock-'));
  const child = await liveChild();
  try {
    // The previous holder crashed; its pid now belongs to `child`, which started later.
    writeFileSync(join(dir, 'svc.lock'), `${child.pid}:1`);
    const lock = new PgliteLock(dir);
    t.notThrows(() => lock.acquire());
    lock.release();
    t.false(existsSync(join(dir, 'svc.lock')), 'released');
  } finally {
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a PGlite lock of the old format (pid only) whose pid now belongs to a process started later is taken over', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-sec-lock-'));
  writeFileSync(join(dir, 'svc.lock'), '0');
  const child = await liveChild();
  try {
    // Written an hour ago by a server that crashed; `child` got its pid since.
    writeFileSync(join(dir, 'svc.lock'), String(child.pid));
    utimesSync(join(dir, 'svc.lock'), new Date(Date.now() - HOUR), new Date(Date.now() - HOUR));
    const lock = new PgliteLock(dir);
    t.notThrows(() => lock.acquire());
    lock.release();
  } finally {
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a PGlite lock held by a live process is refused, naming it (new and old lock formats)', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-sec-lock-'));
  const child = await liveChild();
  try {
    for (const content of [`${child.pid}:${startTime(child.pid!)}`, String(child.pid)]) {
      writeFileSync(join(dir, 'svc.lock'), content); // written after the holder started, as a real holder does
      const error = t.throws(() => new PgliteLock(dir).acquire());
      t.regex(error!.message, new RegExp(`in use by process ${child.pid}`), content);
      t.is(readFileSync(join(dir, 'svc.lock'), 'utf8'), content, 'the live lock is left alone');
    }
  } finally {
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
});

test('processes starting together: exactly one takes the PGlite lock', async (t) => {
  for (const stale of [false, true]) {
    const dir = mkdtempSync(join(tmpdir(), 'svc-sec-lock-'));
    mkdirSync(join(dir, 'pglite'));
    // Also from a stale lock: every contender sees a dead holder and tries to take over.
    if (stale) writeFileSync(join(dir, 'pglite', 'svc.lock'), '4194303999:7');
    try {
      const runs = Array.from({ length: 6 }, () => {
        const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'security-lock-child.ts'), dir, '1500'], { stdio: ['ignore', 'pipe', 'inherit'] });
        children.push(child);
        let out = '';
        child.stdout!.on('data', (c) => (out += c));
        return new Promise<string>((resolve) => child.once('close', () => resolve(out.trim())));
      });
      // Let every child load and spin on the barrier, then release them at once.
      await new Promise((r) => setTimeout(r, 3000));
      writeFileSync(join(dir, 'go'), '');
      const results = await Promise.all(runs);
      t.is(results.filter((r) => r === 'won').length, 1, `${stale ? 'stale lock' : 'no lock'}: ${results.join(' | ')}`);
      t.true(results.filter((r) => r !== 'won').every((r) => r.includes('in use by process')), results.join(' | '));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
});
