import test from 'ava';
import { spawnSync } from 'node:child_process';
import { createOpenAIRealtimePlugin } from '../../plugins/openai-realtime/index.ts';
import { startFakeOpenAIModels } from '../fakes/openai-models.ts';
import { isErrorBody, startTestServer } from './harness.ts';
import { exerciseRestart } from './restart-scenario.ts';

test.serial('embedded PGlite: the same migrations and API work, errors keep their shape, restart keeps data', async (t) => {
  const fake = await startFakeOpenAIModels({ validKeys: ['sk-pglite'], models: ['gpt-realtime'] });
  let s = await startTestServer({ label: 'pglite', pglite: true, plugins: [createOpenAIRealtimePlugin({ baseURL: fake.baseURL })] });
  try {
    t.is(s.server.config.databaseUrl, undefined);
    const list = await s.call('GET', '/v1/agents?limit=5');
    t.is(list.status, 200);
    t.is(typeof list.body.pagination.total_items, 'number');
    const bad = await s.call('POST', '/v1/agents', { body: { title: 't'.repeat(256) } });
    t.is(bad.status, 400);
    t.true(isErrorBody(bad.body));
    const a = (await s.call('POST', '/v1/agents', { body: { title: 'lite' } })).body;
    t.is((await s.call('GET', `/v1/agents/${a.agent_id}`, { key: s.keyB })).status, 404);
    t.is((await s.call('DELETE', `/v1/agents/${a.agent_id}`)).status, 204);
    s = await exerciseRestart(t, s, 'sk-pglite');
  } finally {
    await s.stop();
    await fake.close();
  }
});

test.serial('a server that does not share the embedded database (embedded in another program, no socket): the CLI refuses, naming the process', async (t) => {
  const s = await startTestServer({ label: 'pglite_lock', pglite: true, parts: { shareEmbeddedDatabase: false } });
  try {
    const child = spawnSync(process.execPath, ['bin/svc.js', 'keys', 'list', '--org', 'org-a'], {
      env: { ...process.env, DATABASE_URL: '', SVC_DATA_DIR: s.dataDir }, encoding: 'utf8', timeout: 60_000,
    });
    t.is(child.status, 1, child.stdout + child.stderr);
    t.regex(child.stdout, /in use by process \d+, which does not share it \(no server listening on .*\.s\.PGSQL\.5432.*DATABASE_URL/s);
    t.is((await s.call('GET', '/v1/agents')).status, 200, 'the server is unaffected');
  } finally {
    await s.stop();
  }
});
