/**
 * The bot runner end to end, with real parts only: an embedded room behind the real signalling
 * WebSocket, the offline engines (espeak TTS, phrase STT, WebRTC VAD, rule-based responder), the
 * real human-portrait face published over WebRTC, and a headless libwebrtc visitor that speaks
 * into its microphone track and reads the session messages. Timeouts are shortened through the
 * runner's options; time bounds only catch hangs.
 */
import test from 'ava';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { chunkAudio, concat, rms, silence } from '../../core/audio.ts';
import { RealClock, type Clock } from '../../core/clock.ts';
import { Registry } from '../../core/registry.ts';
import type { FaceModel } from '../../processors/avatar/face-model.ts';
import { BotRunner, type BotRunnerOptions } from '../../agent/bot-runner.ts';
import type { AgentRuntimeRecord } from '../../agent/agent-pipeline.ts';
import type { SessionOutcome } from '../../agent/session-contract.ts';
import { AGENT_DEFAULTS } from '../../server/services/agent-defaults.ts';
import { facePlugin } from '../../plugins/face/index.ts';
import { localPlugin, LocalTTSService } from '../../plugins/local/index.ts';
import { EmbeddedRoomProvider, RoomRegistry, type AvatarRoom } from '../../transports/webrtc/index.ts';
import { startEmbeddedSignalling, type EmbeddedSignalling } from '../support/embedded-signalling.ts';
import { RoomVisitor } from './room-visitor.ts';
import { holdsWithin, until } from '../../testing/until.ts';
import { AppendedContextBudget, APPENDED_CONTEXT_LIMITS } from '../../agent/appended-context.ts';
import { REPORT_THROTTLE_DEFAULTS } from '../../core/report-throttle.ts';
import { createOpenAIRealtimePlugin } from '../../plugins/openai-realtime/index.ts';
import { startOpenAIRealtimeFake } from '../fakes/openai-realtime.ts';

const registry = new Registry().use(localPlugin).use(facePlugin);
const faceModel = registry.create<FaceModel>('face', 'human-portrait', {});
const voice = new LocalTTSService();
const rooms = new RoomRegistry();
let world: EmbeddedSignalling;
let provider: EmbeddedRoomProvider;

test.before(async () => {
  world = await startEmbeddedSignalling(rooms);
  provider = world.provider;
  await voice.warmUp();
});

test.after.always(async () => {
  await world?.close();
});

function agent(overrides: Partial<AgentRuntimeRecord> = {}): AgentRuntimeRecord {
  return {
    ...AGENT_DEFAULTS,
    agent_id: '7b0c0a8e-1111-4c4c-8888-0000000000a1',
    system_prompt: 'You are Ada.',
    tts_provider: 'local',
    tools: [],
    ...overrides,
    behaviour: { ...AGENT_DEFAULTS.behaviour, greeting: 'Hello, I am Ada.', ...overrides.behaviour },
    advanced: { ...AGENT_DEFAULTS.advanced, ...overrides.advanced },
  } as AgentRuntimeRecord;
}

/** Each runner's clock: its timers (runner, worker, face session) are counted to find leaks. */
const clocks = new WeakMap<BotRunner, RealClock>();

function runner(overrides: Partial<BotRunnerOptions> = {}): BotRunner {
  const quiet = { info: () => undefined, warn: () => undefined };
  const clock = new RealClock();
  const bot = new BotRunner({
    registry,
    providers: { stt: 'local', llm: 'local', vad: 'local' },
    // A small canvas keeps the 2-core test machine responsive (the server opens 640x360).
    openFace: (_agent, clock: Clock, limits) => faceModel.openSession({ configuration: { width: 256, height: 144 }, imageFormat: limits.imageFormat }, clock),
    rooms,
    logger: quiet,
    timeouts: { joinDeadlineMs: 20_000, departureGraceMs: 20_000, subscribeWaitMs: 5_000, clientReadyWaitMs: 60_000, stopTimeoutMs: 5_000 },
    tuning: { vadOptions: { stopMs: 500 }, clock },
    ...overrides,
  });
  clocks.set(bot, clock);
  return bot;
}

/**
 * No timer of the session's clock is left, nothing is published, no server peer connection. The
 * face session's wait for a frame's due time (under 40 ms) may outlive its close by a moment: a
 * real leak (an interval, a session timer) would still be there half a second later.
 */
async function nothingLeft(t: import('ava').ExecutionContext, bot: BotRunner, room: import('../../transports/webrtc/index.ts').Room): Promise<void> {
  const clock = clocks.get(bot)!;
  await holdsWithin(() => clock.pendingTimers() === 0, { timeoutMs: 500, intervalMs: 20 });
  t.is(clock.pendingTimers(), 0, 'no timer left on the session clock');
  t.is(bot.sessions, 0);
  t.is(room.publisherId, null);
  t.true(Object.values(room.peerStates()).every((state) => state === 'none'), JSON.stringify(room.peerStates()));
}

async function session(bot: BotRunner, record: AgentRuntimeRecord = agent()) {
  const room: AvatarRoom = await provider.createRoom();
  const running = await bot.start({ sessionId: `s_${room.room}`, callId: 'c1', agent: record, clientUserRef: 'visitor-7', room });
  let outcome: SessionOutcome | undefined;
  void running.ended.then((o) => (outcome = o));
  return { room, running, outcome: () => outcome, embedded: rooms.get(room.room)! };
}

async function speech(text: string): Promise<Int16Array> {
  const parts: Int16Array[] = [];
  for await (const e of voice.synthesize({ text, language: 'en', sampleRate: 16_000 })) if (e.type === 'audio') parts.push(e.pcm);
  return concat([...parts, silence(300, 16_000)]);
}

/** Each word of `text` as the offline TTS says it, with the loud speech (10 ms windows) before its start. */
async function wordStarts(text: string): Promise<{ word: string; loudBeforeMs: number }[]> {
  const audio: Int16Array[] = [];
  const words: { word: string; startMs: number }[] = [];
  for await (const e of voice.synthesize({ text, language: 'en', sampleRate: 16_000 })) {
    if (e.type === 'audio') audio.push(e.pcm);
    else if (e.type === 'words') words.push(...e.words.map((w) => ({ word: w.word, startMs: w.startMs })));
  }
  const loud = [...chunkAudio(concat(audio), 16_000, 10)].map((c) => rms(c) > LOUD);
  return words.map((w) => ({ word: w.word, loudBeforeMs: loud.slice(0, Math.floor(w.startMs / 10)).filter(Boolean).length * 10 }));
}

const LOUD = 0.02;
const types = (v: RoomVisitor) => v.messages.map((m) => m.message.type);
const botTurns = (v: RoomVisitor) => v.ofType('transcript-turn').filter((m) => m.owner === 'bot');

test.serial('a visitor is greeted after client-ready, talks with the bot, and hangs up', async (t) => {
  const bot = runner();
  const s = await session(bot);
  const visitor = await RoomVisitor.join(s.room.roomUrl, s.room.subscriberToken);
  try {
    await until(() => visitor.connectionState === 'connected' && visitor.videoFrames > 5, { timeoutMs: 15_000, intervalMs: 20, what: 'the idle face to arrive' });
    t.deepEqual(visitor.videoSize, { width: 256, height: 144 });
    // Connected, but the client has not said it is ready: no greeting yet.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    t.is(visitor.audibleMs(), 0, 'nothing is spoken before client-ready');
    t.false(types(visitor).includes('bot-started-speaking'));

    const readyAt = Date.now();
    // This process runs the bot, its face and the visitor: a stalled event loop sends the bot's
    // audio in bursts, which the visitor's jitter buffer partly conceals and discards. Its delays
    // go into the message below (run M1, a CPU hog beside the run, heard 480 of 920 ms).
    const loop = monitorEventLoopDelay({ resolution: 10 });
    loop.enable();
    t.teardown(() => loop.disable());
    visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
    await until(() => botTurns(visitor).length >= 1, { timeoutMs: 20_000, intervalMs: 20, what: () => `the greeting turn; messages: ${types(visitor).join(',')}` });
    t.like(visitor.ofType('bot-ready')[0], { version: '1.0.0', session_id: `s_${s.room.room}`, capabilities: { audio_out: true, video_out: true, audio_in: true } });
    // The greeting as the TTS says it, in 10 ms windows above the same level; the received audio
    // trails the transcript by the receiver's jitter buffer, so it gets a moment to arrive.
    const said = await speech('Hello, I am Ada.');
    let saidAudibleMs = 0;
    for (const c of chunkAudio(said, 16_000, 10)) if (rms(c) > 0.01) saidAudibleMs += 10;
    await holdsWithin(() => visitor.audibleMs(readyAt) >= saidAudibleMs * 0.6, { timeoutMs: 3000, intervalMs: 20 });
    loop.disable();
    const delays = `event loop delay p99 ${(loop.percentile(99) / 1e6).toFixed(0)} ms, max ${(loop.max / 1e6).toFixed(0)} ms`;
    t.true(visitor.audibleMs(readyAt) >= saidAudibleMs * 0.6, `the greeting is heard: ${visitor.audibleMs(readyAt)} of ${saidAudibleMs} ms audible (${delays})`);
    t.deepEqual(botTurns(visitor)[0], { type: 'transcript-turn', owner: 'bot', text: 'Hello, I am Ada.', final: true, turn_id: 0 });
    const states = visitor.ofType('bot-state').map((m) => m.state);
    t.deepEqual(states.slice(0, 4), ['initializing', 'listening', 'speaking', 'listening']);
    const greeting = types(visitor);
    t.true(greeting.indexOf('bot-started-speaking') < greeting.indexOf('bot-output'));
    t.true(greeting.indexOf('bot-output') < greeting.indexOf('bot-tts-stopped'));
    t.deepEqual(visitor.ofType('bot-tts-stopped')[0], { type: 'bot-tts-stopped', interrupted: false });
    t.is(visitor.ofType('bot-output').at(-1)?.text, 'Hello, I am Ada.');

    // Malformed and unknown client messages are ignored; the session goes on.
    visitor.sendMessage({ type: 'no-such-message' });
    visitor.sendMessage({ type: 'append-system-context', text: 42 });
    visitor.sendMessage({ type: 'append-system-context', text: 'x'.repeat(4001) });
    visitor.send({ type: 'client_message', message: 'not an object' });
    visitor.send({ type: 'client_message', message: { type: 'append-system-context', text: 'y'.repeat(20_000) } });
    await until(() => visitor.signalling.filter((m) => m.type === 'error').length >= 2, { timeoutMs: 5000, intervalMs: 20, what: 'two signalling errors' });
    t.deepEqual(visitor.signalling.filter((m) => m.type === 'error').map((m) => [m.code, m.fatal]), [['malformed_message', false], ['message_too_large', false]]);

    // The visitor's context for later turns: the offline responder follows a language pin.
    visitor.sendMessage({ type: 'append-system-context', text: 'Always respond in French.' });
    const before = visitor.messages.length;
    visitor.say(await speech('Thank you'));
    await until(() => botTurns(visitor).length >= 2, { timeoutMs: 30_000, intervalMs: 20, what: () => `the answer turn; messages since the question: ${types(visitor).slice(before).join(',')}` });
    const turn = visitor.messages.slice(before).map((m) => m.message);
    const userTurn = turn.find((m) => m.type === 'transcript-turn' && m.owner === 'user');
    t.like(userTurn, { owner: 'user', final: true, turn_id: 1 });
    const transcription = turn.find((m) => m.type === 'user-transcription');
    t.like(transcription, { final: true, user_id: 'visitor-7' });
    t.is(transcription?.text, userTurn?.text);
    const answer = botTurns(visitor)[1]!;
    t.is(answer.turn_id, 1);
    t.regex(String(answer.text), /prie|reconna|compr|désolé|Désolé/i, 'the answer follows the appended system context (French)');
    const order = turn.map((m) => m.type);
    for (const [a, b] of [
      ['user-started-speaking', 'user-stopped-speaking'],
      ['user-stopped-speaking', 'user-transcription'],
      ['user-transcription', 'transcript-turn'],
      ['bot-llm-text', 'bot-started-speaking'],
      ['bot-started-speaking', 'latency-report'],
      ['latency-report', 'bot-tts-stopped'],
    ] as const) t.true(order.indexOf(a) >= 0 && order.indexOf(a) < order.indexOf(b), `${a} before ${b}: ${order.join(',')}`);
    const latency = visitor.ofType('latency-report')[0]!;
    t.is(latency.turn_id, 1);
    t.true((latency.user_stopped_to_bot_audio_ms as number) > 0);
    const stages = latency.stages as Record<string, number | null>;
    t.is(stages.vad_stop_ms, 500);
    for (const k of ['stt_ms', 'llm_ttfb_ms', 'tts_ttfb_ms', 'avatar_ms']) t.is(typeof stages[k], 'number', `${k} measured`);
    t.deepEqual(visitor.ofType('bot-state').map((m) => m.state).slice(-3), ['thinking', 'speaking', 'listening']);

    visitor.sendMessage({ type: 'hang-up' });
    const outcome = await s.running.ended;
    t.is(outcome.terminationReason, 'client_hung_up');
    t.is(outcome.failureDetail, null);
    t.is(outcome.participantCount, 1);
    t.like(outcome.metadata, { turns: 3, user_turns: 1, room_provider: 'embedded', client_ready: true });
    t.like(outcome.metadata, { latency_turns: 1, latency_p50_ms: latency.user_stopped_to_bot_audio_ms, latency_max_ms: latency.user_stopped_to_bot_audio_ms });
    t.true((outcome.metadata.first_frame_ms as number) >= 0);
    await until(() => visitor.ofType('session-ended').length === 1, { timeoutMs: 10_000, intervalMs: 20, what: 'session-ended at the visitor' });
    t.deepEqual(visitor.ofType('session-ended')[0], { type: 'session-ended', reason: 'client_hung_up' });
    t.is(visitor.ofType('bot-state').at(-1)?.state, 'ended');
    // Nothing left running: unpublished, no server peer, the runner forgot it; the room is the server's.
    await nothingLeft(t, bot, s.embedded);
    t.deepEqual(Object.values(s.embedded.peerStates()), ['none'], 'the visitor is still in the room, without a peer');
    t.false(s.embedded.closed);
    await until(() => visitor.signalling.some((m) => m.type === 'unpublished'), { timeoutMs: 10_000, intervalMs: 20, what: 'unpublished on the signalling socket' });
    t.is((await s.running.stop('client_released')).terminationReason, 'client_hung_up', 'stop after the end returns the first outcome');
  } finally {
    visitor.close();
    rooms.closeRoom(s.room.room);
  }
});

test.serial('nobody joins before the join deadline: join_timeout', async (t) => {
  const bot = runner({ timeouts: { joinDeadlineMs: 1500 } });
  const started = Date.now();
  const s = await session(bot);
  const outcome = await s.running.ended;
  t.is(outcome.terminationReason, 'join_timeout');
  t.regex(outcome.failureDetail ?? '', /nobody joined/);
  t.is(outcome.participantCount, 0);
  t.true(Date.now() - started >= 1400);
  t.like(outcome.metadata, { turns: 0, client_ready: false, conversation_started_ms: null });
  await nothingLeft(t, bot, s.embedded);
  rooms.closeRoom(s.room.room);
});

test.serial('a visitor who joins the signalling but never completes WebRTC does not hold the session: join_timeout at the deadline', async (t) => {
  const bot = runner({ timeouts: { joinDeadlineMs: 2000 } });
  const s = await session(bot);
  const page = await RoomVisitor.join(s.room.roomUrl, s.room.subscriberToken, { media: false });
  try {
    // Bounded so that the old code (joining cleared the deadline: the session ran forever) fails here.
    const outcome = await until(() => s.outcome(), { timeoutMs: 30_000, what: 'the session to end' });
    t.is(outcome.terminationReason, 'join_timeout');
    t.regex(outcome.failureDetail ?? '', /joined but no peer connection connected within 2000 ms/);
    t.is(outcome.participantCount, 1);
    await until(() => page.ofType('session-ended')[0]?.reason === 'join_timeout', { timeoutMs: 10_000, intervalMs: 20, what: 'session-ended (join_timeout) at the page' });
    await nothingLeft(t, bot, s.embedded);
  } finally {
    page.close();
    rooms.closeRoom(s.room.room);
  }
});

test.serial('session_limit_seconds counts from admission whatever the session does: a joined page that never connected ends at the limit', async (t) => {
  // The join deadline (20 s here) is longer than the limit; the conversation never starts.
  const bot = runner();
  const started = Date.now();
  const s = await session(bot, agent({ session_limit_seconds: 2 }));
  const page = await RoomVisitor.join(s.room.roomUrl, s.room.subscriberToken, { media: false });
  try {
    const outcome = await until(() => s.outcome(), { timeoutMs: 15_000, what: 'the session to end at its limit' });
    t.is(outcome.terminationReason, 'session_limit_reached');
    t.true(Date.now() - started >= 1900, 'not before the limit');
    t.like(outcome.metadata, { conversation_started_ms: null });
    await nothingLeft(t, bot, s.embedded);
  } finally {
    page.close();
    rooms.closeRoom(s.room.room);
  }
});

test.serial('appended system context is bounded per session: past the limit the page gets a context_limit error and the text is not added', async (t) => {
  const bot = runner();
  const s = await session(bot, agent({ starts_conversation: false }));
  const page = await RoomVisitor.join(s.room.roomUrl, s.room.subscriberToken);
  try {
    const perText = 4_000;
    const fits = Math.floor(APPENDED_CONTEXT_LIMITS.maxTotalCharacters / perText);
    for (let i = 0; i <= fits; i++) page.sendMessage({ type: 'append-system-context', text: `${i} `.padEnd(perText, 'x') });
    const error = await until(() => page.ofType('error')[0], { what: 'the context_limit error' });
    t.like(error, { code: 'context_limit', fatal: false });
    t.regex(String(error.message), new RegExp(`limited to ${APPENDED_CONTEXT_LIMITS.maxTotalCharacters} characters per session \\(${fits * perText} used\\); this text was not added`));
    page.sendMessage({ type: 'append-system-context', text: 'one more' });
    await until(() => page.ofType('error').length === 2, { what: 'the second refusal' });
    t.is(s.outcome(), undefined, 'the session goes on');
  } finally {
    await s.running.stop('client_released');
    page.close();
    rooms.closeRoom(s.room.room);
  }
});

test.serial('ignored client messages are logged a few times, not once each: a flood costs a few warning lines', async (t) => {
  const warnings: Record<string, unknown>[] = [];
  const bot = runner({ logger: { info: () => undefined, warn: (fields: Record<string, unknown>, message: string) => warnings.push({ ...fields, message }) } as never });
  const s = await session(bot);
  const page = await RoomVisitor.join(s.room.roomUrl, s.room.subscriberToken, { media: false });
  try {
    const flood = 40; // under the signalling rate limit: every one reaches the bot
    for (let i = 0; i < flood; i++) page.sendMessage({ type: `unknown-${i}` });
    page.sendMessage({ type: 'client-ready', version: '1.0.0' }); // handled after the flood, in order
    await until(() => page.ofType('bot-ready').length === 1, { what: 'bot-ready after the flood' });
    const ignored = warnings.filter((w) => w.message === 'client message ignored');
    t.is(ignored.length, REPORT_THROTTLE_DEFAULTS.burst, `${ignored.length} warning lines for ${flood} ignored messages`);
    t.like(ignored[0], { reason: 'unknown message type `unknown-0`' });
    t.like((await s.running.stop('client_released')).metadata, { client_messages_ignored: flood }, 'every one still counted');
  } finally {
    page.close();
    rooms.closeRoom(s.room.room);
  }
});

test('the appended context budget: a count limit and a size limit, whichever comes first', (t) => {
  const budget = new AppendedContextBudget({ maxMessages: 3, maxTotalCharacters: 10 });
  t.is(budget.admit('abcd'), null);
  t.is(budget.admit('abcd'), null);
  t.like(budget.admit('abc'), { code: 'context_limit', fatal: false }, '11 characters');
  t.is(budget.admit('ab'), null, 'a refused text takes no room');
  t.regex(budget.admit('')?.message ?? '', /already has 3 appended system context messages/);
});

test.serial('a visitor who drops and comes back within the grace continues; one who leaves for good ends the session', async (t) => {
  t.timeout(90_000); // 16 s on a quiet 2-core machine; bounded at about four times that
  const bot = runner({ timeouts: { departureGraceMs: 4000 } });
  const s = await session(bot);
  const first = await RoomVisitor.join(s.room.roomUrl, s.room.subscriberToken);
  first.sendMessage({ type: 'client-ready', version: '1.0.0' });
  await until(() => botTurns(first).length >= 1, { timeoutMs: 25_000, intervalMs: 20, what: 'the greeting turn at the first page' });
  first.close(); // the tab died: no leave, the socket just closes
  await new Promise((resolve) => setTimeout(resolve, 1000));
  t.is(s.outcome(), undefined, 'still running within the grace');

  const second = await RoomVisitor.join(s.room.roomUrl, s.room.subscriberToken);
  try {
    second.sendMessage({ type: 'client-ready', version: '1.0.0' });
    await until(() => second.ofType('bot-ready').length === 1 && second.connectionState === 'connected', { timeoutMs: 15_000, intervalMs: 20, what: 'bot-ready at the second page, connected' });
    t.is(second.ofType('bot-state')[0]?.state, 'listening', 'the conversation is already running');
    second.say(await speech('What can you do?'));
    await until(() => botTurns(second).length >= 1, { timeoutMs: 30_000, intervalMs: 20, what: () => `the greeting turn at the second page; messages: ${types(second).join(',')}` });
    t.false(botTurns(second).some((m) => m.text === 'Hello, I am Ada.'), 'no second greeting');
    t.is(second.ofType('transcript-turn').find((m) => m.owner === 'user')?.turn_id, 1);
    await until(() => second.ofType('bot-state').at(-1)?.state === 'listening', { timeoutMs: 15_000, intervalMs: 20, what: 'the bot listening to the second page' });
    t.is(s.outcome(), undefined);

    const leftAt = Date.now();
    second.leave();
    const outcome = await s.running.ended;
    t.is(outcome.terminationReason, 'client_left');
    t.true(Date.now() - leftAt >= 3500, 'after the grace');
    t.is(outcome.participantCount, 1, 'one visitor at a time');
    t.like(outcome.metadata, { user_turns: 1 });
    await nothingLeft(t, bot, s.embedded);
  } finally {
    second.close();
    rooms.closeRoom(s.room.room);
  }
});

test.serial('stop(client_released) ends a live session cleanly and tells the visitor', async (t) => {
  const bot = runner();
  const s = await session(bot, agent({ starts_conversation: false }));
  const visitor = await RoomVisitor.join(s.room.roomUrl, s.room.subscriberToken);
  try {
    visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
    await until(() => visitor.ofType('bot-state').some((m) => m.state === 'listening'), { timeoutMs: 15_000, intervalMs: 20, what: 'the bot listening' });
    await new Promise((resolve) => setTimeout(resolve, 500));
    t.is(visitor.audibleMs(), 0, 'starts_conversation false: no greeting');
    const outcome = await s.running.stop('client_released');
    t.is(outcome.terminationReason, 'client_released');
    t.is(outcome, await s.running.stop('server_shutdown'), 'idempotent');
    await until(() => visitor.ofType('session-ended').length === 1, { timeoutMs: 10_000, intervalMs: 20, what: 'session-ended at the visitor' });
    t.is(visitor.ofType('session-ended')[0]?.reason, 'client_released');
    await nothingLeft(t, bot, s.embedded);
  } finally {
    visitor.close();
    rooms.closeRoom(s.room.room);
  }
});

test.serial('the greeting waits at most subscribeWaitMs for the connection, and clientReadyWaitMs for a client that never says client-ready', async (t) => {
  const bot = runner({ timeouts: { subscribeWaitMs: 1500, clientReadyWaitMs: 1500 } });
  // A page that says client-ready but whose peer connection never comes up.
  const s = await session(bot);
  const page = await RoomVisitor.join(s.room.roomUrl, s.room.subscriberToken, { media: false });
  try {
    const readyAt = Date.now();
    page.sendMessage({ type: 'client-ready', version: '1.0.0' });
    await until(() => page.ofType('bot-state').some((m) => m.state === 'listening'), { timeoutMs: 10_000, intervalMs: 20, what: 'the bot listening' });
    const startedAfter = page.messages.find((m) => m.message.type === 'bot-state' && m.message.state === 'listening')!.at - readyAt;
    t.true(startedAfter >= 1400, `started ${startedAfter} ms after client-ready`);
    await until(() => botTurns(page).length === 1, { timeoutMs: 20_000, intervalMs: 20, what: 'the greeting turn (spoken anyway)' });
    t.is(page.connectionState, 'none');
  } finally {
    await s.running.stop('client_released');
    page.close();
    rooms.closeRoom(s.room.room);
  }
  // A connected client that never says client-ready still gets its conversation.
  const other = await session(bot);
  const plain = await RoomVisitor.join(other.room.roomUrl, other.room.subscriberToken);
  try {
    await until(() => plain.connectionState === 'connected', { timeoutMs: 15_000, intervalMs: 20, what: 'the plain visitor to connect' });
    const connectedAt = Date.now();
    await until(() => botTurns(plain).length === 1, { timeoutMs: 20_000, intervalMs: 20, what: 'the greeting turn' });
    const greetedAfter = plain.messages.find((m) => m.message.type === 'bot-started-speaking')!.at - connectedAt;
    t.true(greetedAfter >= 1000, `greeted ${greetedAfter} ms after connecting`);
    t.true(plain.audibleMs(connectedAt) > 0);
    t.is(plain.ofType('bot-ready').length, 0);
    t.is((await other.running.stop('client_released')).metadata.client_ready, false);
  } finally {
    plain.close();
    rooms.closeRoom(other.room.room);
  }
});

test.serial('the agent hangs up (end_call): the farewell is heard, then session-ended agent_ended', async (t) => {
  const bot = runner();
  const s = await session(bot, agent({ starts_conversation: false, behaviour: { farewell_message: 'It was nice talking to you.' } }));
  const visitor = await RoomVisitor.join(s.room.roomUrl, s.room.subscriberToken);
  try {
    visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
    await until(() => visitor.ofType('bot-state').some((m) => m.state === 'listening') && visitor.connectionState === 'connected', { timeoutMs: 15_000, intervalMs: 20, what: 'the visitor connected and the bot listening' });
    visitor.say(await speech('Goodbye'));
    const outcome = await s.running.ended;
    t.is(outcome.terminationReason, 'agent_ended');
    t.is(outcome.failureDetail, null);
    await until(() => visitor.ofType('session-ended').length === 1, { timeoutMs: 10_000, intervalMs: 20, what: 'session-ended at the visitor' });
    const order = types(visitor);
    t.true(botTurns(visitor).some((m) => m.text === 'It was nice talking to you.'), 'the farewell was spoken to the end');
    t.true(order.lastIndexOf('bot-tts-stopped') < order.indexOf('session-ended'), 'session-ended after the farewell');
    t.deepEqual(visitor.ofType('session-ended')[0], { type: 'session-ended', reason: 'agent_ended' });
    await nothingLeft(t, bot, s.embedded);
  } finally {
    visitor.close();
    rooms.closeRoom(s.room.room);
  }
});

test.serial('session_limit_seconds ends the session with the farewell: session_limit_reached', async (t) => {
  t.timeout(90_000); // 17 s on a quiet 2-core machine; bounded at about four times that
  const bot = runner();
  // The limit counts from the bot's start, start-up included, and the first session of a process
  // pays its engines' warm-up (12 s on a loaded machine, run alone): that is spent here first.
  // Then the limit must leave time for the visitor to connect (the other tests allow 15 s for it):
  // this test is about a conversation running when the limit comes.
  const warmUp = await session(bot);
  await warmUp.running.stop('client_released');
  rooms.closeRoom(warmUp.room.room);
  const s = await session(bot, agent({ starts_conversation: false, session_limit_seconds: 15, behaviour: { farewell_message: 'Time is up.', max_conversation_duration_seconds: 1800 } }));
  const visitor = await RoomVisitor.join(s.room.roomUrl, s.room.subscriberToken);
  try {
    visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
    const outcome = await s.running.ended;
    t.is(outcome.terminationReason, 'session_limit_reached');
    await until(() => visitor.ofType('session-ended')[0]?.reason === 'session_limit_reached', { timeoutMs: 10_000, intervalMs: 20, what: 'session-ended (session_limit_reached) at the visitor' });
    t.true(botTurns(visitor).some((m) => m.text === 'Time is up.'), types(visitor).join(','));
    await nothingLeft(t, bot, s.embedded);
  } finally {
    visitor.close();
    rooms.closeRoom(s.room.room);
  }
  // The behaviour's own limit, when it is the shorter one, is max_duration_reached.
  const other = await session(bot, agent({ starts_conversation: false, session_limit_seconds: 600, behaviour: { max_conversation_duration_seconds: 1 } }));
  const second = await RoomVisitor.join(other.room.roomUrl, other.room.subscriberToken);
  try {
    second.sendMessage({ type: 'client-ready', version: '1.0.0' });
    t.is((await other.running.ended).terminationReason, 'max_duration_reached');
  } finally {
    second.close();
    rooms.closeRoom(other.room.room);
  }
});

test.serial('the visitor barges in: the answer stops with bot-tts-stopped interrupted, the new turn is answered', async (t) => {
  const bot = runner();
  const s = await session(bot, agent({ starts_conversation: false }));
  const visitor = await RoomVisitor.join(s.room.roomUrl, s.room.subscriberToken);
  try {
    visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
    await until(() => visitor.ofType('bot-state').some((m) => m.state === 'listening') && visitor.connectionState === 'connected', { timeoutMs: 15_000, intervalMs: 20, what: 'the visitor connected and the bot listening' });
    // Each piece of audio received, with its duration from its sample count.
    const received: { at: number; ms: number; rms: number }[] = [];
    visitor.onAudio = (samples, sampleRate, channels, at) => received.push({ at, ms: (samples.length / channels / sampleRate) * 1000, rms: rms(samples) });
    visitor.say(await speech('What can you do?'));
    await until(() => visitor.ofType('bot-started-speaking').length === 1, { timeoutMs: 20_000, intervalMs: 20, what: () => `bot-started-speaking; messages: ${types(visitor).join(',')}` });
    await new Promise((resolve) => setTimeout(resolve, 800));
    visitor.say(await speech('Thank you'));
    await until(() => visitor.ofType('bot-tts-stopped').length >= 2, { timeoutMs: 30_000, intervalMs: 20, what: () => `two bot-tts-stopped; messages: ${types(visitor).join(',')}` });
    t.deepEqual(visitor.ofType('bot-tts-stopped').map((m) => m.interrupted), [true, false]);
    const bots = botTurns(visitor);
    t.is(bots.length, 2);
    // The model's whole first answer, as it streamed before the cut:
    const cutAt = visitor.messages.findIndex((m) => m.message.type === 'bot-tts-stopped');
    const written = visitor.messages.slice(0, cutAt).filter((m) => m.message.type === 'bot-llm-text').map((m) => m.message.text).join('').trim();
    const played = String(bots[0]!.text);
    t.true(played.length > 0 && written.startsWith(played) && played.length < written.length, `a proper prefix: played "${played}" of "${written}"`);
    t.is(visitor.messages.slice(0, cutAt).filter((m) => m.message.type === 'bot-output').at(-1)?.message.text, played, 'bot-output grew to the same words');
    // The words match the audio the visitor heard: every word the TTS starts within the heard
    // speech is listed, none starting well after it. Heard speech: the loud 10 ms of the answer
    // received, from its first to the first long silence (durations from sample counts, not clock
    // times, and silence not counted, so a slow or jittery delivery does not change it). Word
    // starts: the same TTS on the same text, as loud speech before each word (the cut falls inside
    // the first clause, which is synthesised alike).
    const answerStart = visitor.messages.find((m) => m.message.type === 'bot-started-speaking')!.at;
    const first = received.findIndex((l) => l.at >= answerStart - 200 && l.rms > LOUD);
    let heardMs = 0;
    for (let i = first, quiet = 0; i >= 0 && i < received.length && quiet < 700; i++) {
      if (received[i]!.rms > LOUD) {
        heardMs += received[i]!.ms;
        quiet = 0;
      } else quiet += received[i]!.ms;
    }
    const timeline = await wordStarts(written);
    const tolerance = 150 + heardMs * 0.1;
    const shouldHave = timeline.filter((w) => w.loudBeforeMs < heardMs - tolerance).length;
    const mayHave = timeline.filter((w) => w.loudBeforeMs < heardMs + tolerance).length;
    const count = played.split(/\s+/).length;
    t.log(`${count} words listed for ${heardMs} ms of speech heard: "${played}"; ${JSON.stringify(timeline.slice(0, count + 2))}`);
    t.true(count >= shouldHave && count <= mayHave, `${count} words listed for ${heardMs} ms of speech heard; speech before each word ${JSON.stringify(timeline.slice(0, mayHave + 2))}`);
    t.is(bots[1]!.text, 'You are welcome.');
    t.deepEqual(bots.map((m) => m.turn_id), [1, 2]);
  } finally {
    await s.running.stop('client_released');
    visitor.close();
    rooms.closeRoom(s.room.room);
  }
});

test.serial('a client-mode tool call reaches the page as a tool-call message, in its place in the turn', async (t) => {
  const phrase = 'Call tool show product with sku 42';
  const bot = runner({ providers: { stt: 'local', llm: 'local', vad: 'local', options: { 'stt:local': { phrases: [phrase, 'Thank you'] } } } });
  const tools = [{
    enabled: true,
    type: 'function' as const,
    function: { name: 'show_product', description: 'Shows a product', parameters: { type: 'object', properties: { sku: { type: 'string' } }, required: ['sku'], additionalProperties: false } },
    delivery: { mode: 'client' as const },
  }];
  const s = await session(bot, agent({ starts_conversation: false, tools }));
  const visitor = await RoomVisitor.join(s.room.roomUrl, s.room.subscriberToken);
  try {
    visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
    await until(() => visitor.ofType('bot-state').some((m) => m.state === 'listening') && visitor.connectionState === 'connected', { timeoutMs: 15_000, intervalMs: 20, what: 'the visitor connected and the bot listening' });
    visitor.say(await speech(phrase));
    await until(() => visitor.ofType('tool-call').length === 1, { timeoutMs: 30_000, intervalMs: 20, what: () => `the tool-call message; messages: ${types(visitor).join(',')}` });
    const call = visitor.ofType('tool-call')[0]!;
    t.like(call, { type: 'tool-call', function_name: 'show_product', arguments: { sku: '42' } });
    t.regex(String(call.tool_call_id), /^call_local_/);
    t.is(visitor.ofType('transcript-turn').find((m) => m.owner === 'user')?.text, phrase);
    t.true(types(visitor).indexOf('transcript-turn') < types(visitor).indexOf('tool-call'), 'after the user turn that asked for it');
  } finally {
    await s.running.stop('client_released');
    visitor.close();
    rooms.closeRoom(s.room.room);
  }
});

test.serial('the face session stops under the bot: pipeline_error', async (t) => {
  let face: import('../../processors/avatar/face-model.ts').FaceSession | undefined;
  const bot = runner({
    openFace: async (_agent, clock, limits) => (face = await faceModel.openSession({ configuration: { width: 256, height: 144 }, imageFormat: limits.imageFormat }, clock)),
  });
  const s = await session(bot);
  face!.close();
  const outcome = await s.running.ended;
  t.is(outcome.terminationReason, 'pipeline_error');
  t.regex(outcome.failureDetail ?? '', /avatar stopped publishing/);
  await nothingLeft(t, bot, s.embedded);
  rooms.closeRoom(s.room.room);
});

test.serial('a session that cannot start rejects and leaves nothing in the room', async (t) => {
  const noFace = runner({ openFace: async () => Promise.reject(new Error('face model unavailable')) });
  const room = await provider.createRoom();
  await t.throwsAsync(noFace.start({ sessionId: 's_x', callId: 'c', agent: agent(), clientUserRef: null, room }), { message: 'face model unavailable' });
  t.is(rooms.get(room.room)!.publisherId, null);
  await t.throwsAsync(runner().start({ sessionId: 's_y', callId: 'c', agent: agent({ tts_provider: 'nope' }), clientUserRef: null, room }), { message: /no tts plugin named "nope"/ });
  await t.throwsAsync(runner().start({ sessionId: 's_z', callId: 'c', agent: agent({ mode: 'third_party' }), clientUserRef: null, room }), { message: /no sts_provider/ });
  t.is(rooms.get(room.room)!.publisherId, null);
  rooms.closeRoom(room.room);
  await t.throwsAsync(runner().start({ sessionId: 's_w', callId: 'c', agent: agent(), clientUserRef: null, room }), { message: /not open/ });
});

test.serial('a third_party agent: the provider greets after client-ready and answers the visitor; the same messages and endings', async (t) => {
  const fake = await startOpenAIRealtimeFake({ replies: ['Welcome, I am Ada.', 'Sunny and warm all day.'], userTranscripts: ['what is the weather'] });
  t.teardown(() => fake.close());
  const s2sRegistry = new Registry().use(localPlugin).use(facePlugin).use(createOpenAIRealtimePlugin({ baseURL: fake.baseURL, tls: { ca: fake.ca } }));
  const bot = runner({ registry: s2sRegistry });
  const room = await provider.createRoom();
  const record = { ...agent({ mode: 'third_party', behaviour: { greeting: 'Welcome, I am Ada.' } }), sts_provider: 'openai-realtime', sts_config_id: null, provider_config: {} };
  const running = await bot.start({ sessionId: `s_${room.room}`, callId: 'c1', agent: record, clientUserRef: null, room, stsApiKey: fake.apiKey });
  const visitor = await RoomVisitor.join(room.roomUrl, room.subscriberToken);
  try {
    await until(() => visitor.connectionState === 'connected', { timeoutMs: 15_000, intervalMs: 20, what: 'the visitor to connect' });
    await new Promise((resolve) => setTimeout(resolve, 500));
    t.is(fake.connections.length, 0, 'the provider is not connected before client-ready');
    visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
    await until(() => botTurns(visitor).length >= 1, { timeoutMs: 20_000, intervalMs: 20, what: () => `the greeting turn; messages: ${types(visitor).join(',')}` });
    t.like(botTurns(visitor)[0], { text: 'Welcome, I am Ada.', turn_id: 0 });
    // A tone burst is speech to the fake's energy detector.
    const burst = new Int16Array(16_000 * 1.1);
    for (let i = 0; i < 16_000 * 0.5; i++) burst[i] = Math.round(9000 * Math.sin((2 * Math.PI * 220 * i) / 16_000));
    visitor.say(burst);
    await until(() => botTurns(visitor).length >= 2, { timeoutMs: 20_000, intervalMs: 20, what: () => `the answer turn; messages: ${types(visitor).join(',')}` });
    t.like(visitor.ofType('transcript-turn').find((m) => m.owner === 'user'), { text: 'what is the weather', turn_id: 1 });
    t.like(botTurns(visitor)[1], { text: 'Sunny and warm all day.', turn_id: 1 });
    t.is(visitor.ofType('latency-report')[0]?.turn_id, 1);
    visitor.sendMessage({ type: 'hang-up' });
    const outcome = await running.ended;
    t.is(outcome.terminationReason, 'client_hung_up');
    t.like(outcome.metadata, { user_turns: 1, latency_turns: 1 });
    await nothingLeft(t, bot, rooms.get(room.room)!);
    t.true(JSON.stringify(visitor.messages).indexOf(fake.apiKey) < 0, 'the provider key never reaches the page');
  } finally {
    visitor.close();
    rooms.closeRoom(room.room);
  }
});
