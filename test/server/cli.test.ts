import test from 'ava';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from '../../server/cli/svc.ts';
import { API_KEY_CACHE } from '../../server/services/api-keys.ts';
import { createTestDatabase, SECRETS, startTestServer } from './harness.ts';

const env = (databaseUrl: string) => ({ DATABASE_URL: databaseUrl, SVC_ENCRYPTION_KEY: SECRETS.encryptionKey, SVC_SIGNING_SECRET: SECRETS.signingSecret });

test('keys create prints the key once; list shows only the prefix; revoke disables it', async (t) => {
  const db = await createTestDatabase('cli');
  try {
    const out: string[] = [];
    t.is(await runCli(['keys', 'create', '--org', 'acme', '--name', 'ci', '--json'], (l) => out.push(l), env(db.url)), 0);
    const created = JSON.parse(out.pop()!);
    t.regex(created.key, /^svc_[A-Za-z0-9_-]{43}$/);
    t.is(created.organization, 'acme');
    t.is(await runCli(['keys', 'list', '--org', 'acme'], (l) => out.push(l), env(db.url)), 0);
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
      t.is(await runCli(['keys', 'revoke', created.api_key_id], (l) => out.push(l), env(db.url)), 0);
      // The server caches successful key lookups for API_KEY_CACHE.ttlMs; a revocation from
      // another process takes effect once that entry expires.
      await new Promise((r) => setTimeout(r, API_KEY_CACHE.ttlMs + 50));
      t.is((await s.call('GET', '/v1/agents', { key: created.key })).status, 401);
      t.is(await runCli(['keys', 'revoke', created.api_key_id], (l) => out.push(l), env(db.url)), 1, 'revoking twice reports nothing to revoke');
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

test('npx svc (bin/svc.js) runs the CLI through tsx against the embedded database', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bin-'));
  try {
    const run = (args: string[]) =>
      new Promise<{ code: number | null; stdout: string }>((resolve) => {
        const child = spawn(process.execPath, ['bin/svc.js', ...args], { env: { ...process.env, DATABASE_URL: '', SVC_DATA_DIR: dataDir } });
        let stdout = '';
        child.stdout.on('data', (d) => (stdout += d));
        child.on('close', (code) => resolve({ code, stdout }));
      });
    const created = await run(['keys', 'create', '--org', 'bin-org', '--name', 'from bin']);
    t.is(created.code, 0);
    t.regex(created.stdout, /svc_[A-Za-z0-9_-]{43}/);
    const listed = await run(['keys', 'list', '--org', 'bin-org']);
    t.regex(listed.stdout, /from bin/);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});
