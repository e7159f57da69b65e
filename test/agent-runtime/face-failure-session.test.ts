/**
 * A face that stops rendering, end to end: the render worker of a live session's face is killed
 * (as a crash of the renderer would). Before, the face's frames ended in an error that two of
 * their subscribers (the avatar processor, the bot session) left unhandled, and rxjs rethrew it
 * from a timer: an uncaught exception that took the whole process down, with every session on it.
 * Now the session ends `pipeline_error` with a fatal `face_failed` error that reaches the visitor,
 * and nothing is left running; the test process going on is the rest of the proof.
 *
 * Real parts: an embedded room behind the real signalling WebSocket, a libwebrtc visitor, the
 * offline engines, the human-portrait face on a render pool of its own (so the worker killed is
 * this session's). Time bounds only catch hangs.
 */
import test from 'ava';
import { RealClock, type Clock } from '../../core/clock.ts';
import { Registry } from '../../core/registry.ts';
import { BotRunner } from '../../agent/bot-runner.ts';
import type { AgentRuntimeRecord } from '../../agent/agent-pipeline.ts';
import { AGENT_DEFAULTS } from '../../server/services/agent-defaults.ts';
import { FaceRenderPool, HumanFaceModel } from '../../plugins/face/index.ts';
import { localPlugin } from '../../plugins/local/index.ts';
import { RoomVisitor } from '../agent/room-visitor.ts';
import { holdsWithin, until } from '../../testing/until.ts';
import { startEmbeddedSignalling, type EmbeddedSignalling } from '../support/embedded-signalling.ts';

const registry = new Registry().use(localPlugin);
const pool = new FaceRenderPool({ threads: 1, idleShutdownMs: 60_000 });
const faceModel = new HumanFaceModel('human-portrait', { renderPool: pool });
let world: EmbeddedSignalling;

test.before(async () => {
  world = await startEmbeddedSignalling();
});

test.after.always(async () => {
  await world?.close();
  await pool.close();
});

const record = {
  ...AGENT_DEFAULTS,
  agent_id: '7b0c0a8e-1111-4c4c-8888-0000000000b3',
  system_prompt: 'You are Ada.',
  tts_provider: 'local',
  starts_conversation: false,
  tools: [],
} as AgentRuntimeRecord;

test('a session whose face stops rendering ends with pipeline_error (face_failed) instead of taking the process down', async (t) => {
  const clock = new RealClock();
  const bot = new BotRunner({
    registry,
    providers: { stt: 'local', llm: 'local', vad: 'local' },
    openFace: (_agent, c: Clock, limits) => faceModel.openSession({ configuration: { width: 256, height: 144 }, imageFormat: limits.imageFormat }, c),
    rooms: world.rooms,
    logger: { info: () => undefined, warn: () => undefined },
    timeouts: { joinDeadlineMs: 20_000, departureGraceMs: 20_000, subscribeWaitMs: 5_000, clientReadyWaitMs: 60_000, stopTimeoutMs: 5_000 },
    tuning: { clock },
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
  await until(() => visitor.videoFrames >= 5, { timeoutMs: 15_000, intervalMs: 20, what: () => `five video frames at the visitor (${visitor.videoFrames})` });

  const [worker] = pool.describe();
  t.is(worker?.sessions, 1, "the session renders on the pool's one worker");
  await pool.killWorker(worker!.threadId);

  const outcome = await running.ended;
  t.is(outcome.terminationReason, 'pipeline_error');
  t.regex(outcome.failureDetail ?? '', /^the face stopped rendering: face render worker exited/);
  await until(() => visitor.ofType('session-ended').length > 0, { timeoutMs: 5_000, intervalMs: 20, what: 'session-ended at the visitor' });
  t.like(visitor.ofType('error').find((m) => m.fatal === true), { code: 'face_failed' });
  t.like(visitor.ofType('session-ended')[0], { reason: 'pipeline_error' });
  await holdsWithin(() => clock.pendingTimers() === 0, { timeoutMs: 500, intervalMs: 20 });
  t.is(clock.pendingTimers(), 0, 'nothing left running on the session clock');
  t.is(bot.sessions, 0);
  // An error left unhandled is rethrown by rxjs from a timer: give it its turn inside the test.
  await new Promise((r) => setTimeout(r, 50));
});
