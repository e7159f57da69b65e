import test from 'ava';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { Registry } from '../../core/registry.ts';
import { createServer } from '../../server/build-server.ts';
import { createTestDatabase, SECRETS, testFacePlugin } from './harness.ts';

test('request logs record method, path, status and duration, and never keys or secrets', async (t) => {
  const lines: string[] = [];
  const sink = new Writable({ write(chunk, _e, done) { lines.push(String(chunk)); done(); } });
  const db = await createTestDatabase('logs');
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-logs-'));
  const registry = new Registry().use(testFacePlugin);
  const server = await createServer({ ...SECRETS, port: 0, host: '127.0.0.1', databaseUrl: db.url, dataDir }, { registry, logger: pino({ level: 'info' }, sink) });
  try {
    const { url } = await server.listen();
    const { key } = await server.services.apiKeys.create('logged', 'k');
    const providerKey = 'sk-provider-secret-value-42';
    const created = await fetch(`${url}/v1/agents`, {
      method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' },
      body: JSON.stringify({ title: 'logged', sts_api_key: providerKey, auth_enabled: true }),
    });
    const agent = (await created.json()) as { agent_id: string; auth_secret: string; organization_id: string };
    const asset = (await (await fetch(`${url}/v1/assets?source=template`, { headers: { 'x-api-key': key } })).json()) as any;
    await fetch(asset.data[0].asset_url);
    await fetch(`${url}/v1/agents/not-a-uuid`, { headers: { 'x-api-key': key } });
    const log = lines.join('');
    const entries = lines.map((l) => JSON.parse(l)).filter((e) => e.msg === 'request');
    t.true(entries.some((e) => e.method === 'POST' && e.path === '/v1/agents' && e.status === 201 && typeof e.ms === 'number'));
    t.true(entries.some((e) => e.path === '/v1/agents/not-a-uuid' && e.status === 400));
    t.false(log.includes(key), 'API key');
    t.false(log.includes(providerKey), 'provider key');
    t.false(log.includes(agent.auth_secret), 'auth secret');
    t.false(log.includes('signature='), 'signed URL query');
  } finally {
    await server.close();
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
