/**
 * The policy for a speech-to-text that can no longer work, end to end: a session whose Deepgram
 * connection keeps being closed (the Deepgram wire fake cuts every connection) does not carry on
 * deaf. The STT processor gives up, its fatal error reaches the visitor, and the session ends
 * with `pipeline_error` and the reason as its failure detail, with nothing left running.
 *
 * Real parts: an embedded room behind the real signalling WebSocket, a libwebrtc visitor whose
 * microphone streams (silence) in real time, the offline engines and face, the Deepgram plugin
 * against its wire fake. Time bounds only catch hangs.
 */
import test from 'ava';
import { RealClock, type Clock } from '../../core/clock.ts';
import { Registry } from '../../core/registry.ts';
import type { FaceModel } from '../../processors/avatar/face-model.ts';
import { BotRunner } from '../../agent/bot-runner.ts';
import type { AgentRuntimeRecord } from '../../agent/agent-pipeline.ts';
import { AGENT_DEFAULTS } from '../../server/services/agent-defaults.ts';
import { deepgramPlugin } from '../../plugins/deepgram/index.ts';
import { facePlugin } from '../../plugins/face/index.ts';
import { localPlugin } from '../../plugins/local/index.ts';
import { RoomVisitor } from '../agent/room-visitor.ts';
import { holdsWithin, until } from '../../testing/until.ts';
import { startEmbeddedSignalling, type EmbeddedSignalling } from '../support/embedded-signalling.ts';
import { startDeepgramFake, type DeepgramFake } from '../fakes/deepgram.ts';

const registry = new Registry().use(localPlugin).use(facePlugin).use(deepgramPlugin);
const faceModel = registry.create<FaceModel>('face', 'human-portrait', {});
let world: EmbeddedSignalling;
let deepgram: DeepgramFake;

test.before(async () => {
  world = await startEmbeddedSignalling();
  // Every connection is cut once 100 ms of audio reached it.
  deepgram = await startDeepgramFake({ dropAfterAudioMs: 100 });
});

test.after.always(async () => {
  await world?.close();
  await deepgram?.close();
});

const record = {
  ...AGENT_DEFAULTS,
  agent_id: '7b0c0a8e-1111-4c4c-8888-0000000000b2',
  system_prompt: 'You are Ada.',
  tts_provider: 'local',
  starts_conversation: false,
  tools: [],
} as AgentRuntimeRecord;

test('a session whose STT connection keeps closing ends with pipeline_error and the reason, instead of a deaf bot', async (t) => {
  const clock = new RealClock();
  const bot = new BotRunner({
    registry,
    providers: { stt: 'deepgram', llm: 'local', vad: 'local', options: { 'stt:deepgram': { apiKey: deepgram.apiKey, baseUrl: deepgram.url } } },
    openFace: (_agent, c: Clock, limits) => faceModel.openSession({ configuration: { width: 256, height: 144 }, imageFormat: limits.imageFormat }, c),
    rooms: world.rooms,
    logger: { info: () => undefined, warn: () => undefined },
    timeouts: { joinDeadlineMs: 20_000, departureGraceMs: 20_000, subscribeWaitMs: 5_000, clientReadyWaitMs: 60_000, stopTimeoutMs: 5_000 },
    tuning: { clock, sttOptions: { reconnectBaseMs: 20, reconnectMaxMs: 40, reconnectAttempts: 2 } },
  });
  const room = await world.provider.createRoom();
  const running = await bot.start({ sessionId: `s_${room.room}`, callId: 'c1', agent: record, clientUserRef: null, room });
  const visitor = await RoomVisitor.join(room.roomUrl, room.subscriberToken);
  t.teardown(() => {
    visitor.close();
    world.rooms.closeRoom(room.room);
  });
  await until(() => visitor.connectionState === 'connected', { timeoutMs: 15_000, intervalMs: 20, what: 'the visitor to connect' });
  visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });

  const outcome = await running.ended;
  t.is(outcome.terminationReason, 'pipeline_error');
  t.regex(outcome.failureDetail ?? '', /^speech-to-text connection lost and 2 reconnect attempts failed \(the Deepgram connection closed unexpectedly/);
  t.is(deepgram.connections.length, 3, 'the first connection and the 2 reconnects of the budget');
  await until(() => visitor.ofType('session-ended').length > 0, { timeoutMs: 5_000, intervalMs: 20, what: 'session-ended at the visitor' });
  t.like(visitor.ofType('error').find((m) => m.fatal === true), { code: 'stt_unavailable' });
  t.like(visitor.ofType('session-ended')[0], { reason: 'pipeline_error' });
  await holdsWithin(() => clock.pendingTimers() === 0, { timeoutMs: 500, intervalMs: 20 });
  t.is(clock.pendingTimers(), 0, 'nothing left running on the session clock');
  t.is(bot.sessions, 0);
});
