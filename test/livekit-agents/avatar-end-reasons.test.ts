/**
 * How an avatar session ends, each reason readable on GET /v1/avatar-sessions/{id} (`end_reason`)
 * with the capacity slot freed: the agent never came (`agent_absent`), the session's time limit
 * (`time_limit`), the agent's room deleted under it (`room_closed`), its face failing (`face_ended`,
 * the render worker killed) and the server shutting down (`server_shutdown`). The agent leaving and a DELETE are in avatar-session.test.ts and
 * avatar-bad-input.test.ts. The agent is a plain rtc-node participant on the fake LiveKit server.
 */
import test from 'ava';
import { dispose, Room } from '@livekit/rtc-node';
import { AccessToken, RoomServiceClient } from 'livekit-server-sdk';
import { facePlugin, sharedFaceRenderPool } from '../../plugins/face/index.ts';
import { mountAvatarSessions, type MountedAvatarSessions } from '../../server/avatar-sessions/index.ts';
import { createCapacityGate, type CapacityGate } from '../../server/capacity/index.ts';
import { startLiveKitServerFake, type LiveKitServerFake } from '../fakes/livekit-server.ts';
import { startTestServer, type TestServer } from '../server/harness.ts';
import { until } from '../../testing/until.ts';

const AGENT_WAIT_MS = 1_500;
/** Long enough for a loaded machine to join and show a first frame before the tests that need one act. */
const MAX_DURATION_MS = 8_000;

let fake: LiveKitServerFake;
let ts: TestServer;
let capacity: CapacityGate;
let avatars: MountedAvatarSessions;
let configId: string;

test.before(async () => {
  fake = await startLiveKitServerFake();
  ts = await startTestServer({ label: 'lk_avatar_end_reasons', plugins: [facePlugin], config: { livekitAllowedRanges: ['127.0.0.0/8'] } });
  // Count limit only, as in avatar-session.test.ts: the shared machine's load would refuse admission.
  capacity = createCapacityGate({ limit: 2, loadCheck: false });
  avatars = mountAvatarSessions(ts.server, { capacity, agentWaitMs: AGENT_WAIT_MS, maxDurationMs: MAX_DURATION_MS, resolver: async () => [{ address: '127.0.0.1', family: 4 }] });
  const config = await ts.call('POST', '/v1/model-configs', { body: { title: 'small', model_variant_id: 'svc/human-portrait/v1', model_configurations: { width: 256, height: 144 } } });
  configId = config.body.model_config_id;
});
test.after.always(async () => {
  await avatars?.close();
  capacity?.close();
  await ts?.stop();
  await fake?.close();
  await dispose();
});

async function token(room: string, identity: string, onBehalf?: string): Promise<string> {
  const at = new AccessToken(fake.apiKey, fake.apiSecret, { identity, ttl: 600, ...(onBehalf ? { attributes: { 'lk.publish_on_behalf': onBehalf } } : {}) });
  at.kind = 'agent';
  at.addGrant({ roomJoin: true, room });
  return at.toJwt();
}

/** An agent in `room` (rtc-node), left at the test's end. */
async function agentIn(t: { teardown(fn: () => unknown): void }, room: string): Promise<Room> {
  const agent = new Room();
  await agent.connect(fake.url, await token(room, 'agent-1'), { autoSubscribe: false, dynacast: false });
  t.teardown(() => agent.disconnect());
  return agent;
}

async function start(room: string): Promise<string> {
  const res = await ts.call('POST', '/v1/avatar-sessions', { body: { config_id: configId, livekit_url: fake.url, livekit_token: await token(room, 'svc-avatar', 'agent-1') } });
  if (res.status !== 201) throw new Error(`POST /v1/avatar-sessions: ${res.status} ${res.text}`);
  return res.body.avatar_session_id as string;
}

const ended = (id: string, timeoutMs: number) =>
  until(async () => {
    const body = (await ts.call('GET', `/v1/avatar-sessions/${id}`)).body;
    return body.status === 'ended' ? body : undefined;
  }, { timeoutMs, intervalMs: 50, what: `avatar session ${id} to end` });

test.serial('the agent never comes: agent_absent after the wait, the slot freed', async (t) => {
  const startedAt = Date.now();
  const id = await start('end-absent');
  const view = await ended(id, AGENT_WAIT_MS + 15_000);
  t.is(view.end_reason, 'agent_absent');
  t.true(Date.now() - startedAt >= AGENT_WAIT_MS, 'not before the agent was given its wait');
  t.is(capacity.snapshot().inUse, 0);
});

test.serial('the time limit: time_limit with the agent still there, the slot freed', async (t) => {
  await agentIn(t, 'end-limit');
  const startedAt = Date.now();
  const id = await start('end-limit');
  const view = await ended(id, MAX_DURATION_MS + 15_000);
  t.is(view.end_reason, 'time_limit');
  t.true(Date.now() - startedAt >= MAX_DURATION_MS - 100, 'not before the limit');
  t.is(capacity.snapshot().inUse, 0);
});

test.serial('the room deleted under the session: room_closed, the slot freed', async (t) => {
  await agentIn(t, 'end-room');
  const id = await start('end-room');
  await until(async () => (await ts.call('GET', `/v1/avatar-sessions/${id}`)).body.metrics.first_frame_ms !== null, { timeoutMs: 15_000, intervalMs: 50, what: 'the first frame' });
  await new RoomServiceClient(fake.url.replace(/^ws/, 'http'), fake.apiKey, fake.apiSecret).deleteRoom('end-room');
  const view = await ended(id, 15_000);
  t.is(view.end_reason, 'room_closed');
  t.is(capacity.snapshot().inUse, 0);
});

test.serial('the face stops rendering (its render worker dies): face_ended, the slot freed', async (t) => {
  await agentIn(t, 'end-face');
  const id = await start('end-face');
  await until(async () => (await ts.call('GET', `/v1/avatar-sessions/${id}`)).body.metrics.first_frame_ms !== null, { timeoutMs: 15_000, intervalMs: 50, what: 'the first frame' });
  // The fault drill of the render pool the face plugin renders on (a worker crash, as an
  // out-of-memory kill would be): the sessions it held fail.
  const pool = sharedFaceRenderPool();
  const busy = pool?.describe().filter((w) => w.sessions > 0) ?? [];
  t.true(busy.length > 0, `the session renders on a worker of the shared pool: ${JSON.stringify(pool?.describe())}`);
  const before = (await ts.call('GET', `/v1/avatar-sessions/${id}`)).body;
  t.is(before.status, 'active', `still active when its face is killed: ${JSON.stringify(before)}`);
  for (const worker of busy) await pool!.killWorker(worker.threadId);
  const view = await ended(id, 15_000);
  t.is(view.end_reason, 'face_ended');
  t.is(capacity.snapshot().inUse, 0);
});

test.serial('the server shuts down: server_shutdown, the slot freed', async (t) => {
  await agentIn(t, 'end-shutdown');
  const id = await start('end-shutdown');
  await avatars.close();
  t.is((await ts.call('GET', `/v1/avatar-sessions/${id}`)).body.end_reason, 'server_shutdown');
  t.is(capacity.snapshot().inUse, 0);
});
