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

test('PostgreSQL: the CLI names the database without its password', async (t) => {
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

test('with npm start running on the embedded database: the CLI on the same SVC_DATA_DIR says it is in use; on another it refuses to create a second one', async (t) => {
  const serverDir = tempDir(t);
  const otherDir = tempDir(t);
  const server = await startServerProcess({ DATABASE_URL: '', SVC_DATA_DIR: serverDir, LOG_LEVEL: 'silent' });
  try {
    const same = await svc(['keys', 'create', '--org', 'acme', '--name', 'second'], { SVC_DATA_DIR: serverDir });
    t.is(same.code, 1);
    t.regex(same.stdout, /the embedded database is in use by process \d+/);
    t.notRegex(same.stdout + same.stderr, NO_STACK);
    const other = await svc(['keys', 'create', '--org', 'acme', '--name', 'second'], { SVC_DATA_DIR: otherDir });
    t.is(other.code, 1);
    t.regex(other.stdout, /no embedded database in .*--create/s);
    t.false(existsSync(join(otherDir, 'pglite')));
  } finally {
    server.kill('SIGKILL');
    await server.exited;
  }
});
