/**
 * Bad input to avatar sessions gets a clear error, never a crash or a held slot: REST errors in
 * the spec's shape (wrong API key, unknown config_id, a room URL resolving to a private address
 * the policy refuses, an expired or unusable token, a LiveKit server refusing the token), and,
 * inside a running session, a byte stream with a wrong sample-rate header or no header, a stream
 * or an lk.clear_buffer from someone who is not the agent (refused, an RPC error), each leaving
 * the session running and the capacity slot accounted. The agent is a plain rtc-node participant
 * speaking the protocol (what @livekit/agents sends: test/livekit-agents/avatar-session.test.ts).
 */
import test from 'ava';
import { dispose, Room, RpcError } from '@livekit/rtc-node';
import { AccessToken } from 'livekit-server-sdk';
import { facePlugin } from '../../plugins/face/index.ts';
import { mountAvatarSessions, type MountedAvatarSessions } from '../../server/avatar-sessions/index.ts';
import { createCapacityGate, type CapacityGate } from '../../server/capacity/index.ts';
import { AVATAR_RPC_ERRORS } from '../../transports/livekit/index.ts';
import { startLiveKitServerFake, type LiveKitServerFake } from '../fakes/livekit-server.ts';
import { isErrorBody, startTestServer, type TestServer } from '../server/harness.ts';
import { until } from '../../testing/until.ts';

let fake: LiveKitServerFake;
let ts: TestServer;
let capacity: CapacityGate;
let avatars: MountedAvatarSessions;
let configId: string;

test.before(async () => {
  fake = await startLiveKitServerFake();
  ts = await startTestServer({ label: 'lk_avatar_bad_input', plugins: [facePlugin], config: { livekitAllowedRanges: ['127.0.0.0/8'] } });
  // Count limit only, as in avatar-session.test.ts: the shared machine's load would refuse admission.
  capacity = createCapacityGate({ limit: 2, loadCheck: false });
  avatars = mountAvatarSessions(ts.server, {
    capacity,
    // `private.example.test` resolves to a private address (10.0.0.7), which SVC_LIVEKIT_ALLOWED_RANGES does not open.
    resolver: async (host) => (host === 'private.example.test' ? [{ address: '10.0.0.7', family: 4 }] : [{ address: '127.0.0.1', family: 4 }]),
  });
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

async function avatarToken(o: { room?: string; identity?: string; onBehalf?: string | null; ttl?: number | string; secret?: string } = {}): Promise<string> {
  const at = new AccessToken(fake.apiKey, o.secret ?? fake.apiSecret, { identity: o.identity ?? 'svc-avatar', ttl: o.ttl ?? 600, ...(o.onBehalf === null ? {} : { attributes: { 'lk.publish_on_behalf': o.onBehalf ?? 'agent-1' } }) });
  at.kind = 'agent';
  at.addGrant({ roomJoin: true, room: o.room ?? 'bad-input-room' });
  return at.toJwt();
}

const post = async (body: Record<string, unknown>, key?: string | null) => ts.call('POST', '/v1/avatar-sessions', { body, ...(key === undefined ? {} : { key }) });

test.serial('REST refusals: each a clear error in the spec shape, no slot held', async (t) => {
  const good = { config_id: configId, livekit_url: fake.url, livekit_token: await avatarToken() };
  const cases: Array<[string, Promise<Awaited<ReturnType<typeof post>>>, number, string]> = [
    ['wrong API key', post(good, 'sk_wrong'), 401, 'unauthorized'],
    ['no API key', post(good, null), 401, 'unauthorized'],
    ['unknown config_id', post({ ...good, config_id: 'svc/no-such-face' }), 404, 'model_config_not_found'],
    ['another organization\'s config', ts.call('POST', '/v1/avatar-sessions', { key: ts.keyB, body: good }), 404, 'model_config_not_found'],
    ['private address', post({ ...good, livekit_url: 'wss://private.example.test' }), 400, 'livekit_url_not_allowed'],
    ['not a ws url', post({ ...good, livekit_url: 'https://lk.example.com' }), 400, 'validation_failed'],
    ['expired token', post({ ...good, livekit_token: await avatarToken({ ttl: -60 }) }), 400, 'livekit_token_expired'],
    ['token without lk.publish_on_behalf', post({ ...good, livekit_token: await avatarToken({ onBehalf: null }) }), 400, 'livekit_token_invalid'],
    ['garbage token', post({ ...good, livekit_token: 'not.a-token' }), 400, 'livekit_token_invalid'],
    ['unknown field', post({ ...good, extra: 1 }), 400, 'validation_failed'],
    ['a token the LiveKit server refuses (wrong secret)', post({ ...good, livekit_token: await avatarToken({ secret: 'another-secret-that-is-long-enough-for-hs256' }) }), 502, 'livekit_join_failed'],
  ];
  for (const [what, pending, status, code] of cases) {
    const res = await pending;
    t.is(res.status, status, `${what}: ${res.text}`);
    t.true(isErrorBody(res.body), `${what}: error shape`);
    t.is(res.body.code, code, what);
  }
  t.is(capacity.snapshot().inUse, 0, 'no refused request holds a slot');
  t.is((await ts.call('GET', '/v1/avatar-sessions/00000000-0000-4000-8000-000000000000')).body.code, 'avatar_session_not_found');
  t.is((await ts.call('DELETE', '/v1/avatar-sessions/00000000-0000-4000-8000-000000000000')).status, 404);
  // The resource is in the published OpenAPI document with the others.
  const doc = (await ts.call('GET', '/v1/openapi.json', { key: null })).body;
  t.truthy(doc.paths['/avatar-sessions']?.post, 'POST /avatar-sessions documented');
  t.truthy(doc.paths['/avatar-sessions/{avatar_session_id}']?.delete, 'DELETE documented');
});

test.serial('inside a session: bad streams and strangers get errors, the session keeps running, DELETE frees the slot', async (t) => {
  const room = 'bad-input-room-2';
  const agent = new Room();
  const at = new AccessToken(fake.apiKey, fake.apiSecret, { identity: 'agent-1', ttl: 600 });
  at.kind = 'agent';
  at.addGrant({ roomJoin: true, room });
  await agent.connect(fake.url, await at.toJwt(), { autoSubscribe: false, dynacast: false });
  t.teardown(() => agent.disconnect());
  const stranger = new Room();
  const st = new AccessToken(fake.apiKey, fake.apiSecret, { identity: 'stranger', ttl: 600 });
  st.addGrant({ roomJoin: true, room });
  await stranger.connect(fake.url, await st.toJwt(), { autoSubscribe: false, dynacast: false });
  t.teardown(() => stranger.disconnect());
  const finished: string[] = [];
  agent.localParticipant!.registerRpcMethod('lk.playback_finished', async (d) => {
    finished.push(d.payload);
    return 'ok';
  });
  agent.localParticipant!.registerRpcMethod('lk.playback_started', async () => 'ok');

  const res = await post({ config_id: configId, livekit_url: fake.url, livekit_token: await avatarToken({ room }) });
  t.is(res.status, 201, res.text);
  const id = res.body.avatar_session_id as string;
  t.is(capacity.snapshot().inUse, 1);
  const metrics = async () => (await ts.call('GET', `/v1/avatar-sessions/${id}`)).body.metrics;
  await until(() => agent.remoteParticipants.has('svc-avatar'), { what: 'the avatar at the agent' });

  // A segment whose header names an impossible rate: refused, and finished (interrupted) so the agent does not wait for it.
  const bad = await agent.localParticipant!.streamBytes({ name: 'AUDIO_bad', topic: 'lk.audio_stream', destinationIdentities: ['svc-avatar'], attributes: { sample_rate: '99', num_channels: '1' } });
  await bad.write(new Uint8Array(4800));
  await bad.close();
  await until(async () => (await metrics()).streams_refused >= 1, { what: 'the bad header refused' });
  t.is((await metrics()).last_stream_error.code, 'bad_sample_rate');
  await until(() => finished.length >= 1, { what: 'playback_finished for the refused segment' });
  t.deepEqual(JSON.parse(finished[0]!), { playback_position: 0, interrupted: true, synchronized_transcript: null });

  // No header at all, then garbage bytes in a stream with a good header (noise is still audio: it plays and finishes).
  const bare = await agent.localParticipant!.streamBytes({ name: 'AUDIO_bare', topic: 'lk.audio_stream', destinationIdentities: ['svc-avatar'] });
  await bare.write(new Uint8Array([1, 2, 3]));
  await bare.close();
  await until(async () => (await metrics()).last_stream_error?.code === 'missing_audio_format', { what: 'the headerless stream refused' });
  const odd = await agent.localParticipant!.streamBytes({ name: 'AUDIO_odd', topic: 'lk.audio_stream', destinationIdentities: ['svc-avatar'], attributes: { sample_rate: '22050', num_channels: '2' } });
  await odd.write(Uint8Array.from({ length: 8821 }, (_, i) => (i * 131) & 0xff)); // an odd byte count: a split sample frame
  await odd.close();
  await until(() => finished.length >= 3, { what: 'the garbage segment played and finished', timeoutMs: 20_000 });
  const garbage = JSON.parse(finished[2]!);
  t.false(garbage.interrupted);
  t.true(Math.abs(garbage.playback_position - 8820 / 4 / 22050) < 0.05, `played ${garbage.playback_position} s`);

  // A stranger may neither speak through the avatar nor clear it.
  const foreign = await stranger.localParticipant!.streamBytes({ name: 'AUDIO_x', topic: 'lk.audio_stream', destinationIdentities: ['svc-avatar'], attributes: { sample_rate: '16000', num_channels: '1' } });
  await foreign.write(new Uint8Array(3200));
  await foreign.close();
  await until(async () => (await metrics()).last_stream_error?.code === 'not_the_agent', { what: 'the stranger refused' });
  const refused = await t.throwsAsync(stranger.localParticipant!.performRpc({ destinationIdentity: 'svc-avatar', method: 'lk.clear_buffer', payload: '' }));
  t.is((refused as RpcError).code, AVATAR_RPC_ERRORS.notTheAgent);
  // The agent's own clear works (nothing playing: no playback_finished owed).
  t.is(await agent.localParticipant!.performRpc({ destinationIdentity: 'svc-avatar', method: 'lk.clear_buffer', payload: '' }), 'ok');
  t.is((await metrics()).clears, 1);

  // A stranger's stream while the agent's segment is still open: refused at once. Before, it
  // waited behind the agent's stream (buffered in full by the SDK meanwhile, without bound) and
  // was refused only when that ended.
  const open = await agent.localParticipant!.streamBytes({ name: 'AUDIO_open', topic: 'lk.audio_stream', destinationIdentities: ['svc-avatar'], attributes: { sample_rate: '16000', num_channels: '1' } });
  await open.write(new Uint8Array(3200));
  const refusedBefore = (await metrics()).streams_refused;
  const early = await stranger.localParticipant!.streamBytes({ name: 'AUDIO_early', topic: 'lk.audio_stream', destinationIdentities: ['svc-avatar'], attributes: { sample_rate: '16000', num_channels: '1' } });
  await early.write(new Uint8Array(3200));
  await until(async () => (await metrics()).streams_refused === refusedBefore + 1, { what: "the stranger's stream refused while the agent's is still open" });
  t.is((await metrics()).last_stream_error.code, 'not_the_agent');
  await early.close().catch(() => undefined);
  await open.close();
  await until(() => finished.length >= 4, { what: 'the open segment played and finished' });
  t.false(JSON.parse(finished[3]!).interrupted);
  t.is((await ts.call('GET', `/v1/avatar-sessions/${id}`)).body.status, 'active', 'still running after every fault');

  // Another organization cannot see or end it; DELETE ends it and frees the slot.
  t.is((await ts.call('GET', `/v1/avatar-sessions/${id}`, { key: ts.keyB })).status, 404);
  t.is((await ts.call('DELETE', `/v1/avatar-sessions/${id}`, { key: ts.keyB })).status, 404);
  const deleted = await ts.call('DELETE', `/v1/avatar-sessions/${id}`);
  t.is(deleted.status, 200, deleted.text);
  t.like(deleted.body, { status: 'ended', end_reason: 'deleted' });
  t.is(capacity.snapshot().inUse, 0);
  await until(() => !agent.remoteParticipants.has('svc-avatar'), { what: 'the avatar leaves the room' });
  t.is((await ts.call('DELETE', `/v1/avatar-sessions/${id}`)).body.end_reason, 'deleted', 'DELETE again: the ended session as it is');
});
