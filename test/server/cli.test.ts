import test from 'ava';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from '../../server/cli/svc.ts';
import { API_KEY_CACHE } from '../../server/services/api-keys.ts';
import { startServerProcess } from '../sessions/server-process.ts';
import { createTestDatabase, SECRETS, startTestServer } from './harness.ts';

const env = (databaseUrl: string) => ({ DATABASE_URL: databaseUrl, SVC_ENCRYPTION_KEY: SECRETS.encryptionKey, SVC_SIGNING_SECRET: SECRETS.signingSecret });

test('keys create prints the key once; list shows only the prefix; revoke disables it', async (t) => {
  const db = await createTestDatabase('cli');
  try {
    const out: string[] = [];
    const notes: string[] = [];
    t.is(await runCli(['keys', 'create', '--org', 'acme', '--name', 'ci', '--json'], (l) => out.push(l), env(db.url), (l) => notes.push(l)), 0);
    const created = JSON.parse(out.pop()!);
    t.regex(notes[0]!, /^svc: using the PostgreSQL .* \(DATABASE_URL\)$/, 'the database is named on the side channel, not in the JSON output');
    t.regex(created.key, /^svc_[A-Za-z0-9_-]{43}$/);
    t.is(created.organization, 'acme');
    t.is(await runCli(['keys', 'list', '--org', 'acme'], (l) => out.push(l), env(db.url), (l) => notes.push(l)), 0);
    const listed = out.pop()!;
    t.true(listed.includes(created.prefix));
    t.false(listed.includes(created.key));
    t.true(listed.includes('ci'));

    const s = await startTestServer({ label: 'cli_srv', config: { databaseUrl: db.url } });
    try {
      const ok = await s.call('GET', '/v1/agents', { key: created.key });
      t.is(ok.status, 200);
      const agent = await s.call('POST', '/v1/agents', { key: created.key, body: { title: 'cli' } });
      t.is(agent.body.created_by, `api_key:${created.api_key_id}`);
      t.is(await runCli(['keys', 'revoke', created.api_key_id], (l) => out.push(l), env(db.url), (l) => notes.push(l)), 0);
      // The server caches successful key lookups for API_KEY_CACHE.ttlMs; a revocation from
      // another process takes effect once that entry expires.
      await new Promise((r) => setTimeout(r, API_KEY_CACHE.ttlMs + 50));
      t.is((await s.call('GET', '/v1/agents', { key: created.key })).status, 401);
      t.is(await runCli(['keys', 'revoke', created.api_key_id], (l) => out.push(l), env(db.url), (l) => notes.push(l)), 1, 'revoking twice reports nothing to revoke');
    } finally {
      await s.stop();
    }
  } finally {
    await db.drop();
  }
});

test('bad CLI usage exits 2 with usage text', async (t) => {
  const out: string[] = [];
  t.is(await runCli(['keys', 'create', '--org', 'x'], (l) => out.push(l), { DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' }), 2, 'argument errors are reported before any database is opened');
  t.is(await runCli(['keys', 'revoke', 'not-an-id'], (l) => out.push(l), { DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' }), 2);
  t.is(await runCli(['nothing'], (l) => out.push(l)), 2);
  t.regex(out.join('\n'), /usage:/);
});

/** `npx svc ...` as a user runs it: bin/svc.js in a child process. */
function svc(args: string[], env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['bin/svc.js', ...args], { cwd: ROOT, env: { ...process.env, DATABASE_URL: '', ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

const ROOT = join(import.meta.dirname, '..', '..');
const NO_STACK = /\n\s+at |Error:|node:internal/;

function tempDir(t: { teardown(fn: () => void): void }): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-cli-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test('npx svc --help and every command\'s --help print usage and exit 0, without a stack trace', async (t) => {
  t.timeout(180_000); // 19 s (42 s before the CLI ran in one process) on a quiet 2-core machine; bounded at about four times that
  const dataDir = tempDir(t);
  const cases: [string[], RegExp][] = [
    [['--help'], /^usage: svc <command>/],
    [['-h'], /^usage: svc <command>/],
    [['help'], /^usage: svc <command>/],
    [['keys', '--help'], /^usage: svc keys <create\|list\|revoke>/],
    [['keys', 'create', '--help'], /^usage: svc keys create --org NAME --name LABEL/],
    [['keys', 'list', '--help'], /^usage: svc keys list --org NAME/],
    [['keys', 'revoke', '--help'], /^usage: svc keys revoke ID/],
    [['help', 'keys', 'revoke'], /^usage: svc keys revoke ID/],
  ];
  for (const [args, usage] of cases) {
    const r = await svc(args, { SVC_DATA_DIR: dataDir });
    t.is(r.code, 0, `${args.join(' ')}: ${r.stdout}${r.stderr}`);
    t.regex(r.stdout, usage, args.join(' '));
    t.regex(r.stdout, /never created silently/, `${args.join(' ')} explains the database choice`);
    t.notRegex(r.stdout + r.stderr, NO_STACK, args.join(' '));
  }
  t.false(existsSync(join(dataDir, 'pglite')), 'help opens no database');
});

test('unknown commands and options: one clear line, usage, exit 2, no stack trace', async (t) => {
  t.timeout(150_000); // 13 s on a quiet 2-core machine; bounded at about four times that
  const dataDir = tempDir(t);
  for (const args of [['--bogus'], ['keys', 'create', '--org', 'a', '--name', 'b', '--nmae', 'c'], ['keys', 'rotate'], ['frobnicate'], ['keys', 'create', '--org']]) {
    const r = await svc(args, { SVC_DATA_DIR: dataDir });
    t.is(r.code, 2, args.join(' '));
    t.regex(r.stdout, /^svc: /, args.join(' '));
    t.regex(r.stdout, /usage: svc/, args.join(' '));
    t.notRegex(r.stdout + r.stderr, NO_STACK, args.join(' '));
  }
});

test('a forgotten SVC_DATA_DIR: the CLI names its database and refuses to create one unless --create', async (t) => {
  t.timeout(180_000); // 26 s on a quiet 2-core machine; bounded at about four times that
  const dataDir = tempDir(t);
  const pglite = join(dataDir, 'pglite');
  const refused = await svc(['keys', 'create', '--org', 'acme', '--name', 'ci'], { SVC_DATA_DIR: dataDir });
  t.is(refused.code, 1);
  t.is(refused.stderr.trim(), `svc: using the embedded database in ${pglite}`);
  t.regex(refused.stdout, new RegExp(`no embedded database in ${pglite.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}.*SVC_DATA_DIR.*--create`, 's'));
  t.notRegex(refused.stdout, /svc_[A-Za-z0-9_-]{43}/, 'no key printed');
  t.false(existsSync(pglite), 'nothing created');
  t.false(existsSync(join(dataDir, 'secrets.json')), 'no secrets generated either');
  t.is((await svc(['keys', 'list', '--org', 'acme'], { SVC_DATA_DIR: dataDir })).code, 1);
  t.false(existsSync(pglite));

  const created = await svc(['keys', 'create', '--org', 'acme', '--name', 'ci', '--create'], { SVC_DATA_DIR: dataDir });
  t.is(created.code, 0, created.stdout + created.stderr);
  t.regex(created.stderr, /creating a new embedded database/);
  const key = /svc_[A-Za-z0-9_-]{43}/.exec(created.stdout)?.[0];
  t.truthy(key);
  // From now on the database exists: no --create needed, nothing said about creating.
  const listed = await svc(['keys', 'list', '--org', 'acme'], { SVC_DATA_DIR: dataDir });
  t.is(listed.code, 0);
  t.regex(listed.stdout, /ci/);
  t.notRegex(listed.stderr, /creating/);
  t.false(listed.stdout.includes(key!));
});

test('an unreachable PostgreSQL: one line naming the database and the cause, exit 1, no stack trace', async (t) => {
  const r = await svc(['keys', 'list', '--org', 'acme'], { DATABASE_URL: 'postgres://nobody:pw@127.0.0.1:1/none' });
  t.is(r.code, 1, r.stdout + r.stderr);
  t.is(r.stderr.trim(), 'svc: using the PostgreSQL nobody@127.0.0.1:1/none (DATABASE_URL)');
  t.regex(r.stdout, /^svc: .*ECONNREFUSED/);
  t.notRegex(r.stdout + r.stderr, NO_STACK);
  t.false(r.stdout.includes(':pw@'), 'no password');
});

test('PostgreSQL: the CLI names the database without its password', async (t) => {
  t.timeout(90_000); // 12 s on a quiet 2-core machine; bounded at about four times that
  const db = await createTestDatabase('cli_pg');
  try {
    const url = new URL(db.url);
    url.password = 'sekrit-password';
    const r = await svc(['keys', 'list', '--org', 'nobody'], { DATABASE_URL: db.url });
    t.is(r.code, 0, r.stdout + r.stderr);
    t.is(r.stderr.trim(), `svc: using the PostgreSQL ${decodeURIComponent(new URL(db.url).username)}@${new URL(db.url).host}${new URL(db.url).pathname} (DATABASE_URL)`);
    const withPassword = await svc(['keys', 'list', '--org', 'nobody'], { DATABASE_URL: url.toString() });
    t.false(withPassword.stderr.includes('sekrit-password'));
  } finally {
    await db.drop();
  }
});

test('with npm start running on the embedded database: the CLI goes through its socket and the key it prints is accepted; another SVC_DATA_DIR is refused; after kill -9 the CLI opens the directory itself', async (t) => {
  t.timeout(240_000); // 35 s on a quiet 2-core machine; bounded at about four times that
  const serverDir = tempDir(t);
  const otherDir = tempDir(t);
  const pglite = join(serverDir, 'pglite');
  let server = await startServerProcess({ DATABASE_URL: '', SVC_DATA_DIR: serverDir, LOG_LEVEL: 'silent' });
  try {
    const created = await svc(['keys', 'create', '--org', 'acme', '--name', 'second', '--json'], { SVC_DATA_DIR: serverDir });
    t.is(created.code, 0, created.stdout + created.stderr);
    t.is(created.stderr, `svc: using the embedded database in ${pglite}\nsvc: the server running on it shares it: going through ${join(pglite, 'run', '.s.PGSQL.5432')}\n`);
    const key = JSON.parse(created.stdout) as { key: string; api_key_id: string };
    const agents = await fetch(`${server.url}/v1/agents`, { headers: { 'X-API-Key': key.key } });
    t.is(agents.status, 200, 'the running server accepts the key the CLI printed');

    const listed = await svc(['keys', 'list', '--org', 'acme'], { SVC_DATA_DIR: serverDir });
    t.is(listed.code, 0, listed.stdout + listed.stderr);
    t.regex(listed.stdout, /second/);
    const revoked = await svc(['keys', 'revoke', key.api_key_id], { SVC_DATA_DIR: serverDir });
    t.is(revoked.code, 0, revoked.stdout + revoked.stderr);
    await new Promise((r) => setTimeout(r, API_KEY_CACHE.ttlMs + 50));
    t.is((await fetch(`${server.url}/v1/agents`, { headers: { 'X-API-Key': key.key } })).status, 401, 'a revocation through the socket reaches the server');

    const other = await svc(['keys', 'create', '--org', 'acme', '--name', 'second'], { SVC_DATA_DIR: otherDir });
    t.is(other.code, 1);
    t.regex(other.stdout, new RegExp(`no embedded database in ${join(otherDir, 'pglite').replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}.*--create`, 's'));
    t.notRegex(other.stdout + other.stderr, NO_STACK);
    t.false(existsSync(join(otherDir, 'pglite')));

    // kill -9: a lock naming a dead process and a socket nobody listens on are left behind.
    server.kill('SIGKILL');
    await server.exited;
    t.true(existsSync(join(pglite, 'svc.lock')) && existsSync(join(pglite, 'run', '.s.PGSQL.5432')), 'the killed server left its lock and socket');
    const alone = await svc(['keys', 'create', '--org', 'acme', '--name', 'third', '--json'], { SVC_DATA_DIR: serverDir });
    t.is(alone.code, 0, alone.stdout + alone.stderr);
    t.is(alone.stderr, `svc: using the embedded database in ${pglite}\n`, 'no server: the CLI opened the directory itself, quietly');
    const third = JSON.parse(alone.stdout) as { key: string };

    server = await startServerProcess({ DATABASE_URL: '', SVC_DATA_DIR: serverDir, LOG_LEVEL: 'silent' });
    t.is((await fetch(`${server.url}/v1/agents`, { headers: { 'X-API-Key': third.key } })).status, 200, 'a restarted server takes over the stale socket and accepts the key');
    const again = await svc(['keys', 'list', '--org', 'acme'], { SVC_DATA_DIR: serverDir });
    t.is(again.code, 0, again.stdout + again.stderr);
    t.regex(again.stderr, /going through/);
  } finally {
    server.kill('SIGKILL');
    await server.exited;
  }
});
