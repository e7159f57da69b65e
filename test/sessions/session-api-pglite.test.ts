/**
 * The same Session API code on the embedded database (PGlite, one process): admission under
 * max_concurrency, release, the reaper's SQL and the call record.
 */
import test from 'ava';
import { until } from '../../testing/until.ts';
import { roomOf, startSessionServer, type SessionTestServer } from './session-harness.ts';

let s: SessionTestServer;
test.before(async () => {
  s = await startSessionServer('session_pglite', { pglite: true });
});
test.after.always(async () => {
  await s?.stop();
});

test('on PGlite: the limit admits exactly max_concurrency of parallel connects, release frees a slot, calls are recorded', async (t) => {
  const agentId = await s.agent({ max_concurrency: 2 });
  const results = await Promise.all(Array.from({ length: 12 }, () => s.connect({ agent_id: agentId })));
  const admitted = results.filter((r) => r.status === 200);
  t.is(admitted.length, 2);
  t.true(results.filter((r) => r.status !== 200).every((r) => r.status === 429 && r.body.error_code === 'concurrency_limit' && r.body.retry_after_seconds >= 1));
  t.deepEqual((await s.release(roomOf(admitted[0]!.body.room_url))).body, { released: 1 });
  const next = await until(async () => {
    const r = await s.connect({ agent_id: agentId });
    return r.status === 200 && r;
  }, { timeoutMs: 10_000, intervalMs: 50, what: 'a freed slot' });
  for (const r of [admitted[1]!, next]) await s.release(roomOf(r.body.room_url));
  const calls = await until(async () => {
    const list = (await s.call('GET', `/v1/agents/${agentId}/calls`)).body.data as any[];
    return list.length === 3 && list.every((c) => c.status === 'completed') && list;
  }, { timeoutMs: 10_000, intervalMs: 50, what: 'three completed calls' });
  t.true(calls.every((c) => c.termination_reason === 'client_released'));
  t.deepEqual(await s.live.sessions.store.reap(), []);
});
