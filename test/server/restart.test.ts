import test from 'ava';
import { createOpenAIRealtimePlugin } from '../../plugins/openai-realtime/index.ts';
import { startFakeOpenAIModels } from '../fakes/openai-models.ts';
import { startTestServer } from './harness.ts';
import { exerciseRestart } from './restart-scenario.ts';

test('a restarted server (PostgreSQL) keeps every resource, key and stored object', async (t) => {
  const fake = await startFakeOpenAIModels({ validKeys: ['sk-restart'], models: ['gpt-realtime'] });
  let s = await startTestServer({ label: 'restart', plugins: [createOpenAIRealtimePlugin({ baseURL: fake.baseURL })] });
  try {
    s = await exerciseRestart(t, s, 'sk-restart');
  } finally {
    await s.stop();
    await fake.close();
  }
});
