/**
 * A session whose visitor can get no media path ends at once as `ice_failed` (a failed call with
 * its reason), instead of holding its slot until the join deadline (issue 27): the page says so
 * in its `hang-up`, or the server has nothing to offer (its port range is full). A hang-up with
 * that reason after the media connected is an ordinary hang-up. Real parts: the embedded room
 * behind the real signalling socket, the bot runner on the offline engines, libwebrtc visitors.
 */
import test from 'ava';
import { createSocket, type Socket } from 'node:dgram';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Registry } from '../../core/registry.ts';
import type { FaceModel } from '../../processors/avatar/face-model.ts';
import { BotRunner } from '../../agent/bot-runner.ts';
import type { AgentRuntimeRecord } from '../../agent/agent-pipeline.ts';
import { AGENT_DEFAULTS } from '../../server/services/agent-defaults.ts';
import { attachRoomSignalling } from '../../server/rooms/room-signalling.ts';
import { facePlugin } from '../../plugins/face/index.ts';
import { localPlugin } from '../../plugins/local/index.ts';
import { EmbeddedRoomProvider, RoomRegistry, RTC_NETWORK_DEFAULTS, type RtcNetworkSettings } from '../../transports/webrtc/index.ts';
import { RoomVisitor } from './room-visitor.ts';
import { until } from '../../testing/until.ts';

const registry = new Registry().use(localPlugin).use(facePlugin);
const faceModel = registry.create<FaceModel>('face', 'human-portrait', {});
const quiet = { info: () => undefined, warn: () => undefined };

const agent = {
  ...AGENT_DEFAULTS,
  agent_id: '7b0c0a8e-1111-4c4c-8888-0000000000a2',
  system_prompt: 'You are Ada.',
  tts_provider: 'local',
  tools: [],
  behaviour: { ...AGENT_DEFAULTS.behaviour, greeting: 'Hello.' },
  advanced: { ...AGENT_DEFAULTS.advanced },
} as AgentRuntimeRecord;

/** Rooms with `network` behind a signalling socket, and a bot runner on them; all stopped at the end. */
async function world(t: import('ava').ExecutionContext, network: RtcNetworkSettings = RTC_NETWORK_DEFAULTS) {
  const rooms = new RoomRegistry({ network, iceAllowedRanges: ['127.0.0.0/8'] });
  const http: Server = createServer((_req, res) => res.writeHead(404).end());
  const signalling = attachRoomSignalling(http, { rooms });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const provider = new EmbeddedRoomProvider(rooms, { signalUrl: `ws://127.0.0.1:${(http.address() as AddressInfo).port}/v1/rooms/signal` });
  const bot = new BotRunner({
    registry,
    providers: { stt: 'local', llm: 'local', vad: 'local' },
    openFace: (_agent, clock, limits) => faceModel.openSession({ configuration: { width: 256, height: 144 }, imageFormat: limits.imageFormat }, clock),
    rooms,
    logger: quiet,
    timeouts: { joinDeadlineMs: 60_000, departureGraceMs: 20_000, subscribeWaitMs: 5_000, clientReadyWaitMs: 60_000, stopTimeoutMs: 5_000 },
  });
  t.teardown(async () => {
    rooms.closeAll();
    await signalling.close();
    http.closeAllConnections();
    await new Promise<void>((resolve) => http.close(() => resolve()));
  });
  const room = await provider.createRoom();
  const running = await bot.start({ sessionId: `s_${room.room}`, callId: 'c1', agent, clientUserRef: null, room });
  t.teardown(() => running.stop('server_shutdown').catch(() => undefined));
  return { room, running, bot };
}

test.serial("the page reports ice_failed in its hang-up: the session ends at once, failed with that reason, long before the join deadline", async (t) => {
  t.timeout(60_000);
  const { room, running } = await world(t);
  const page = await RoomVisitor.join(room.roomUrl, room.subscriberToken, { media: false });
  t.teardown(() => page.close());
  const started = Date.now();
  page.sendMessage({ type: 'hang-up', reason: 'ice_failed' });
  const outcome = await running.ended;
  t.is(outcome.terminationReason, 'ice_failed');
  t.regex(outcome.failureDetail ?? '', /no media path/);
  t.true(Date.now() - started < 30_000, 'not the 60 s join deadline');
  await until(() => page.ofType('session-ended')[0]?.reason === 'ice_failed', { timeoutMs: 10_000, intervalMs: 20, what: 'session-ended (ice_failed) at the page' });
});

test.serial('a hang-up saying ice_failed after the media connected is an ordinary hang-up', async (t) => {
  t.timeout(60_000);
  const { room, running } = await world(t);
  const visitor = await RoomVisitor.join(room.roomUrl, room.subscriberToken);
  t.teardown(() => visitor.close());
  await until(() => visitor.connectionState === 'connected', { timeoutMs: 30_000, what: 'the media path' });
  visitor.sendMessage({ type: 'hang-up', reason: 'ice_failed' });
  t.is((await running.ended).terminationReason, 'client_hung_up');
});

test.serial("the server's port range is full: the visitor is told at once, the session ends ice_failed with failure media_ports_exhausted, the process goes on", async (t) => {
  t.timeout(60_000);
  // The range's only port is held by other sockets, IPv4 and IPv6 (as by another session's peer).
  const holder: Socket = createSocket('udp4');
  await new Promise<void>((resolve) => holder.bind(0, '0.0.0.0', resolve));
  t.teardown(() => holder.close());
  const port = holder.address().port;
  const holder6: Socket = createSocket({ type: 'udp6', ipv6Only: true });
  await new Promise<void>((resolve, reject) => {
    holder6.once('error', reject);
    holder6.bind(port, '::', resolve);
  });
  t.teardown(() => holder6.close());
  const { room, running } = await world(t, { ...RTC_NETWORK_DEFAULTS, portRange: { min: port, max: port } });
  const visitor = await RoomVisitor.join(room.roomUrl, room.subscriberToken);
  t.teardown(() => visitor.close());
  const error = await until(() => visitor.signalling.find((m) => m.type === 'error'), { timeoutMs: 30_000, what: 'the error' });
  t.like(error, { code: 'ice_unavailable', fatal: false });
  const outcome = await running.ended;
  t.is(outcome.terminationReason, 'ice_failed');
  t.is(outcome.failureCode, 'media_ports_exhausted');
  t.is(outcome.participantCount, 1);
});
