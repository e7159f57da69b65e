import test from 'ava';
import { randomUUID } from 'node:crypto';
import { startTestServer, type TestServer } from './harness.ts';

let s: TestServer;
let agentId: string;
let orgId: string;
const times = ['2026-01-01T10:00:00.000Z', '2026-01-02T10:00:00.000Z', '2026-01-03T10:00:00.000Z', '2026-01-04T10:00:00.000Z'];

test.before(async () => {
  s = await startTestServer({ label: 'calls' });
  const a = (await s.call('POST', '/v1/agents', { body: { title: 'caller' } })).body;
  agentId = a.agent_id;
  orgId = a.organization_id;
  // Call history rows are written by the Session API; here they are inserted as it would.
  for (const [i, started] of times.entries()) {
    await s.server.db('agent_calls').insert({
      call_id: randomUUID(), agent_id: agentId, organization_id: orgId, session_id: randomUUID(),
      applied_session_limit_seconds: 600, client_user_ref: `user-${i}`, started_at: started,
      ended_at: i === 3 ? null : new Date(Date.parse(started) + 60_000).toISOString(),
      status: i === 3 ? 'active' : i === 2 ? 'failed' : 'completed',
      termination_reason: i === 3 ? null : i === 2 ? 'pipeline_error' : 'client_left',
      failure_reason: i === 2 ? 'room_creation_failed' : null, participant_count: 2, metadata: JSON.stringify({ i }),
    });
  }
});
test.after.always(async () => {
  await s?.stop();
});

test('calls list newest first with every AgentCall field', async (t) => {
  const res = await s.call('GET', `/v1/agents/${agentId}/calls`);
  t.is(res.status, 200);
  t.deepEqual(res.body.data.map((c: any) => c.started_at), [...times].reverse());
  t.is(res.body.pagination.total_items, 4);
  const c = res.body.data[1];
  t.deepEqual(Object.keys(c).sort(), [
    'agent_id', 'applied_session_limit_seconds', 'call_id', 'client_user_ref', 'ended_at', 'failure_reason', 'metadata',
    'organization_id', 'participant_count', 'session_id', 'started_at', 'status', 'termination_reason',
  ]);
  t.is(c.status, 'failed');
  t.is(c.failure_reason, 'room_creation_failed');
  t.deepEqual(c.metadata, { i: 2 });
  t.is(res.body.data[0].ended_at, null);
});

test('started_after and started_before are exclusive bounds on started_at', async (t) => {
  const res = await s.call('GET', `/v1/agents/${agentId}/calls?started_after=${times[0]}&started_before=${times[3]}`);
  t.deepEqual(res.body.data.map((c: any) => c.started_at), [times[2], times[1]]);
  t.is(res.body.pagination.total_items, 2);
  const after = await s.call('GET', `/v1/agents/${agentId}/calls?started_after=2026-01-02T09:59:59Z`);
  t.is(after.body.data.length, 3);
  const offset = await s.call('GET', `/v1/agents/${agentId}/calls?started_after=2026-01-01T12:00:00%2B02:00`);
  t.is(offset.body.data.length, 3, 'time zone offsets are honoured');
});

test('bad date-times and bad page bounds are 400', async (t) => {
  for (const q of ['started_after=yesterday', 'started_before=2026-13-01T00:00:00Z', 'limit=0', 'limit=101', 'offset=-1']) {
    t.is((await s.call('GET', `/v1/agents/${agentId}/calls?${q}`)).status, 400, q);
  }
  const page = await s.call('GET', `/v1/agents/${agentId}/calls?limit=1&offset=1`);
  t.is(page.body.data[0].started_at, times[2]);
  t.deepEqual(page.body.pagination, { limit: 1, offset: 1, total_items: 4 });
});

test("another organization cannot read an agent's calls (404)", async (t) => {
  const res = await s.call('GET', `/v1/agents/${agentId}/calls`, { key: s.keyB });
  t.is(res.status, 404);
  t.is((await s.call('GET', `/v1/agents/${randomUUID()}/calls`)).status, 404);
});

test('deleting the agent removes its call history too (hard delete)', async (t) => {
  const a = (await s.call('POST', '/v1/agents', { body: { title: 'short-lived' } })).body;
  await s.server.db('agent_calls').insert({
    call_id: randomUUID(), agent_id: a.agent_id, organization_id: orgId, session_id: randomUUID(),
    applied_session_limit_seconds: 60, started_at: new Date().toISOString(), status: 'completed',
  });
  t.is((await s.call('DELETE', `/v1/agents/${a.agent_id}`)).status, 204);
  t.is(await s.server.db('agent_calls').where('agent_id', a.agent_id).first(), undefined);
});
