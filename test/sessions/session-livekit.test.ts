/**
 * A whole conversation through the Session API when the deployment runs its rooms on LiveKit:
 * the server creates the room through LiveKit's room API and the bot joins it with one rtc-node
 * connection; a headless visitor (the real rtc-node SDK) joins with the returned room_url and
 * token, hears the greeting (the offline recogniser finds its words in the audio received), sees
 * the avatar (decoded frames of the session's size whose mouth region moves with the speech),
 * asks a question and gets the answer as audio and transcripts (data packets on the `session`
 * topic), releases, and reads the call record (room_provider livekit, client_released). The LiveKit
 * server is the local fake acting as a small SFU (test/fakes/livekit-server.ts); offline engines,
 * the real human-portrait face, real PostgreSQL.
 */
import test from 'ava';
import { dispose } from '@livekit/rtc-node';
import { LocalTTSService } from '../../plugins/local/index.ts';
import { liveKitSessionSettingsFromEnv } from '../../server/config/env.ts';
import { LiveKitVisitor } from '../agent/livekit-visitor.ts';
import { holdsWithin, until } from '../../testing/until.ts';
import { startLiveKitServerFake, type LiveKitServerFake } from '../fakes/livekit-server.ts';
import { concat } from '../../core/audio.ts';
import { longestQuietStretchMs, recognise, regionMotion, speech, tailHeard } from './conversation-audio.ts';
import { roomOf, startSessionServer, type SessionTestServer } from './session-harness.ts';

const GREETING = 'Welcome to the space station tour.';
const voice = new LocalTTSService();
let fake: LiveKitServerFake;
let s: SessionTestServer;

test.before(async () => {
  fake = await startLiveKitServerFake();
  s = await startSessionServer('session_livekit', {
    // The fake listens on loopback: opened the way an operator would (SVC_LIVEKIT_ALLOWED_RANGES).
    config: { livekitAllowedRanges: ['127.0.0.0/8'] },
    sessions: {
      livekit: { url: fake.url, apiKey: fake.apiKey, apiSecret: fake.apiSecret },
      runner: { tuning: { vadOptions: { stopMs: 500 } }, timeouts: { departureGraceMs: 1500 } },
    },
  });
  await voice.warmUp();
});
test.after.always(async () => {
  await s?.stop();
  await fake?.close();
  await dispose(); // the LiveKit FFI runtime; every room and stream is closed by then
});

/** Why the agent's last call failed (its record's failure detail), for assertion messages. */
async function failureOf(agentId: string): Promise<string> {
  const calls = await s.call('GET', `/v1/agents/${agentId}/calls?limit=1`);
  return String(calls.body?.data?.[0]?.metadata?.failure_detail ?? 'no failure recorded');
}

test.serial('LiveKit settings come all together or not at all', (t) => {
  t.is(liveKitSessionSettingsFromEnv({}), null);
  t.deepEqual(liveKitSessionSettingsFromEnv({ SVC_LIVEKIT_URL: 'wss://lk.example.com', SVC_LIVEKIT_API_KEY: 'k', SVC_LIVEKIT_API_SECRET: 's' }), { url: 'wss://lk.example.com', apiKey: 'k', apiSecret: 's' });
  t.throws(() => liveKitSessionSettingsFromEnv({ SVC_LIVEKIT_URL: 'wss://lk.example.com' }), { message: /together/ });
  t.throws(() => liveKitSessionSettingsFromEnv({ SVC_LIVEKIT_URL: 'https://lk.example.com', SVC_LIVEKIT_API_KEY: 'k', SVC_LIVEKIT_API_SECRET: 's' }), { message: /ws:\/\/ or wss:\/\// });
});

test.serial('a visitor talks to a published agent in a LiveKit room through the Session API, end to end', async (t) => {
  const agentId = await s.agent({
    behaviour: { greeting: GREETING, greeting_mode: 'verbatim', allow_interruption: true },
    starts_conversation: true,
  });
  const res = await s.connect({ agent_id: agentId, client_user_ref: 'visitor-42' }, { origin: 'https://tour.example.org' });
  t.is(res.status, 200, `${res.text}: ${await failureOf(agentId)}`);
  const roomUrl = new URL(res.body.room_url);
  t.is(`${roomUrl.protocol}//${roomUrl.host}`, fake.url, 'the room is on the deployment LiveKit server');
  t.regex(roomOf(res.body.room_url), /^s_/, 'the room to release is named in the room_url (spec: "the room name taken from the room_url")');
  t.true(fake.roomApiRequests.includes('CreateRoom'), 'created through the room API');
  const visitor = await LiveKitVisitor.join(res.body.room_url, res.body.token);
  const audio: { at: number; pcm: Int16Array; rate: number }[] = [];
  const motion: { at: number; mouth: number }[] = [];
  let last: Uint8Array | null = null;
  visitor.onAudio = (samples, rate, _channels, at) => audio.push({ at, pcm: Int16Array.from(samples), rate });
  visitor.onVideoFrame = (frame, at) => {
    const luma = frame.data.subarray(0, frame.width * frame.height);
    // Where the default face's mouth sits at 640x360 (as in session-e2e.test.ts).
    if (last) motion.push({ at, mouth: regionMotion(last, luma, frame.width, frame.height, [0.4, 0.38, 0.5, 0.47]) });
    last = Uint8Array.from(luma);
  };
  try {
    const bot = fake.inRoom(visitor.roomName).find((p) => p.identity !== visitor.identity)!;
    const arrived = await holdsWithin(() => visitor.videoFrames > 10, { timeoutMs: 30_000, intervalMs: 20 });
    t.log(`video: published ${bot.media.videoWidth}x${bot.media.videoHeight} (${bot.media.videoFrames} frames at the SFU), received ${visitor.videoSize?.width}x${visitor.videoSize?.height} (${visitor.videoFrames} frames); bot tracks ${JSON.stringify(bot.tracks.map((tr) => [tr.type, tr.received]))}, refusals ${JSON.stringify(bot.refusals)}, requests ${bot.requests.filter((r) => r !== 'ping' && r !== 'pingReq' && r !== 'trickle').join(',')}`);
    t.true(arrived, `the idle face arrives (${visitor.videoFrames} frames)`);
    // The session canvas is 640x360 (docs/sessions.md). The bot's encoder (rtc-node's libwebrtc)
    // scales the picture down when the CPU is overused, as any WebRTC sender does, so on a loaded
    // machine the visitor may get a smaller picture: its shape is the canvas's, never larger.
    const size = visitor.videoSize!;
    t.true(size.width <= 640 && size.height <= 360 && size.width >= 160, `picture ${size.width}x${size.height}`);
    t.true(Math.abs(size.width / size.height - 640 / 360) < 0.1, `the canvas's 16:9 shape (${size.width}x${size.height})`);
    t.truthy(bot, 'the bot is in the LiveKit room');
    t.true(visitor.trackOwners.has(bot.identity), 'the avatar tracks come from the bot participant');
    t.is(fake.participants.filter((p) => p.identity === bot.identity).length, 1, 'the bot joined once (one connection publishes and listens)');

    const readyAt = Date.now();
    await visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
    await until(() => visitor.ofType('bot-ready').length === 1, { timeoutMs: 15_000, intervalMs: 20, what: 'bot-ready over a data packet' });
    const botTurns = () => visitor.ofType('transcript-turn').filter((m) => m.owner === 'bot');
    await until(() => botTurns().length >= 1, { timeoutMs: 30_000, intervalMs: 20, what: 'the greeting turn to end' });
    t.is(botTurns()[0]!.text, GREETING);
    // The turn ends when its audio left the bot; through the SFU (two jitter buffers) the tail is
    // still on its way: wait until the visitor has heard nothing loud for 400 ms.
    await tailHeard(visitor);
    const media = () => `SFU got ${bot.media.audioPackets} audio packets of the bot (${bot.media.audiblePackets} audible), the visitor ${visitor.audioLevels.length} (${visitor.audibleMs(0)} ms audible); forwarded to the visitor: ${visitor.trackOwners.size} owners`;
    t.true(visitor.audibleMs(readyAt) > 800, `greeting audible at the client: ${visitor.audibleMs(readyAt)} ms; ${media()}`);
    const greetingAudio = audio.filter((a) => a.at >= readyAt);
    const heard = await recognise(concat(greetingAudio.map((a) => a.pcm)), greetingAudio[0]!.rate, [GREETING, 'What is your name?', 'Tell me a joke', 'Goodbye']);
    t.deepEqual(heard, [GREETING], `the offline recogniser finds the greeting in the audio the client received (longest quiet stretch inside it: ${longestQuietStretchMs(visitor, readyAt)} ms)`);

    // The mouth moves with speech: more picture change in the mouth region while the bot is audible than in the idle before.
    const idle = motion.filter((m) => m.at < readyAt);
    const speaking = motion.filter((m) => {
      const near = visitor.audioLevels.filter((l) => Math.abs(l.at - m.at) < 40);
      return near.length > 0 && near.some((l) => l.rms > 0.02);
    });
    const mean = (xs: { mouth: number }[]) => xs.reduce((a, b) => a + b.mouth, 0) / Math.max(1, xs.length);
    const diagnostics = async () =>
      `${media()}; SFU received ${bot.media.videoFrames} frames of the bot, the visitor ${visitor.videoFrames}; bot inbound ${JSON.stringify(await fake.inboundStats(bot.sid))}`;
    t.true(idle.length > 5 && speaking.length > 5, `frames: ${idle.length} idle, ${speaking.length} speaking; ${await diagnostics()}`);
    t.true(mean(speaking) > mean(idle) * 1.5, `mouth region change speaking ${mean(speaking).toFixed(2)} vs idle ${mean(idle).toFixed(2)}`);

    // A question from the visitor's microphone, answered as audio and transcripts.
    const asked = Date.now();
    visitor.say(await speech(voice, 'What is your name?'));
    await until(() => botTurns().length >= 2, { timeoutMs: 30_000, intervalMs: 20, what: 'the answer turn to end' });
    const userTurn = visitor.ofType('transcript-turn').find((m) => m.owner === 'user');
    t.like(userTurn, { text: 'What is your name?', final: true });
    t.true(visitor.ofType('user-transcription').some((m) => m.final === true && m.text === 'What is your name?' && m.user_id === 'visitor-42'));
    t.true(String(botTurns()[1]!.text).length > 0);
    t.true(visitor.audibleMs(asked + 1500) > 300, 'the answer is heard');
    t.deepEqual(visitor.otherPackets, [], 'every data packet was a session message');

    t.log(`picture at the end of the conversation: ${visitor.videoSize?.width}x${visitor.videoSize?.height} after ${visitor.videoFrames} frames`);
    // The visitor releases (the widget's hang-up); the session ends and is recorded, the room deleted.
    t.is(roomOf(res.body.room_url), visitor.roomName, 'the room_url names the room the visitor joined');
    const released = await s.release(visitor.roomName);
    t.deepEqual(released.body, { released: 1 });
    await until(() => visitor.ofType('session-ended').length === 1, { timeoutMs: 10_000, intervalMs: 20, what: 'session-ended at the visitor (before the bot leaves)' });
    t.deepEqual(visitor.ofType('session-ended')[0], { type: 'session-ended', reason: 'client_released' });
    const call = await s.endedCallOf(agentId, res.body.session_id);
    t.like(call, { status: 'completed', termination_reason: 'client_released', failure_reason: null, participant_count: 1, client_user_ref: 'visitor-42' });
    t.is(call.metadata.room_provider, 'livekit');
    t.true(call.metadata.turns >= 3);
    t.is(typeof call.metadata.first_frame_ms, 'number');
    // The record is written first, then the room deleted (an HTTP call to LiveKit), then the session forgotten.
    await until(() => s.live.sessions.size === 0, { timeoutMs: 10_000, intervalMs: 20, what: 'no live session left' });
    await until(() => fake.roomApiRequests.includes('DeleteRoom') && fake.inRoom(visitor.roomName).length === 0, { timeoutMs: 10_000, intervalMs: 20, what: 'the room deleted and empty' });
    t.is(bot.leftBy === 'leave' || bot.leftBy === 'room_deleted', true, `the bot left (${bot.leftBy})`);
  } finally {
    await visitor.close();
  }
});

test.serial('a visitor who leaves the LiveKit room ends the session after the grace: client_left, room deleted', async (t) => {
  const agentId = await s.agent({ behaviour: { greeting: GREETING, greeting_mode: 'verbatim' }, starts_conversation: true });
  const res = await s.connect({ agent_id: agentId });
  t.is(res.status, 200, `${res.text}: ${await failureOf(agentId)}`);
  const visitor = await LiveKitVisitor.join(res.body.room_url, res.body.token);
  try {
    await visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
    await until(() => visitor.ofType('bot-ready').length === 1, { timeoutMs: 15_000, intervalMs: 20, what: 'bot-ready' });
    const room = visitor.roomName;
    await visitor.close(); // leaves (the SDK's LeaveRequest): the bot sees the participant go
    const call = await until(async () => {
      const c = await s.callOf(agentId, res.body.session_id);
      return c?.status !== 'active' && c?.status !== 'starting' && c;
    }, { timeoutMs: 20_000, intervalMs: 50, what: 'the call record' });
    t.like(call, { termination_reason: 'client_left', participant_count: 1 });
    t.is(call.metadata.room_provider, 'livekit');
    await until(() => fake.inRoom(room).length === 0, { timeoutMs: 10_000, intervalMs: 20, what: 'the bot to leave (the room empty)' });
  } finally {
    await visitor.close();
  }
});

test.serial('a reloaded page joining with the same token takes over: the session continues with the new connection', async (t) => {
  const agentId = await s.agent({ behaviour: { greeting: GREETING, greeting_mode: 'verbatim' }, starts_conversation: true });
  const res = await s.connect({ agent_id: agentId });
  t.is(res.status, 200, `${res.text}: ${await failureOf(agentId)}`);
  const first = await LiveKitVisitor.join(res.body.room_url, res.body.token);
  let second: LiveKitVisitor | undefined;
  try {
    await first.sendMessage({ type: 'client-ready', version: '1.0.0' });
    await until(() => first.ofType('bot-ready').length === 1, { timeoutMs: 15_000, intervalMs: 20, what: 'bot-ready at the first page' });
    // LiveKit removes the earlier connection of an identity that joins again (DUPLICATE_IDENTITY):
    // the bot sees the visitor leave and come back at once, well within the departure grace.
    second = await LiveKitVisitor.join(res.body.room_url, res.body.token);
    t.is(second.identity, first.identity);
    await until(() => !first.connected, { timeoutMs: 10_000, intervalMs: 20, what: 'the first page to be replaced' });
    await second.sendMessage({ type: 'client-ready', version: '1.0.0' });
    await until(() => second!.ofType('bot-ready').length === 1, { timeoutMs: 15_000, intervalMs: 20, what: 'bot-ready at the new page' });
    await new Promise((resolve) => setTimeout(resolve, 2500)); // past the 1.5 s departure grace
    t.is(s.live.sessions.size, 1, 'the session goes on');
    const released = await s.release(second.roomName);
    t.deepEqual(released.body, { released: 1 });
    await until(() => second!.ofType('session-ended').length === 1, { timeoutMs: 10_000, intervalMs: 20, what: 'session-ended at the new page' });
    const call = await until(async () => {
      const c = await s.callOf(agentId, res.body.session_id);
      return c?.status !== 'active' && c?.status !== 'starting' && c;
    }, { timeoutMs: 10_000, intervalMs: 50, what: 'the call record' });
    t.like(call, { termination_reason: 'client_released' });
  } finally {
    await first.close();
    await second?.close();
  }
});

test.serial('without the operator range a loopback LiveKit is refused to the bot, and an unreachable LiveKit fails room creation: Session API errors, calls recorded', async (t) => {
  // The same fake, but the SSRF policy's default (no private range opened): the bot may not join.
  const closed = await startSessionServer('session_livekit_refused', {
    sessions: { livekit: { url: fake.url, apiKey: fake.apiKey, apiSecret: fake.apiSecret } },
  });
  t.teardown(() => closed.stop());
  const agentId = await closed.agent({ behaviour: { greeting: GREETING, greeting_mode: 'verbatim' } });
  const before = fake.participants.length;
  const refused = await closed.connect({ agent_id: agentId });
  t.is(refused.status, 502, refused.text);
  t.is(refused.body.error_code, 'orchestrator_error');
  t.false(refused.text.includes('127.0.0.1'), 'no network detail in the answer');
  t.is(fake.participants.length, before, 'nothing reached the LiveKit server');
  const calls = await closed.call('GET', `/v1/agents/${agentId}/calls?limit=10`);
  t.like(calls.body.data[0], { termination_reason: 'bot_start_failed' });
  t.is(calls.body.data[0].metadata.room_provider, 'livekit');
  t.is(fake.roomApiRequests.at(-1), 'DeleteRoom', 'the room made for it is deleted');

  // A LiveKit server that is not there: the room cannot be created.
  const gone = await startLiveKitServerFake();
  const goneUrl = gone.url;
  await gone.close();
  const down = await startSessionServer('session_livekit_down', {
    config: { livekitAllowedRanges: ['127.0.0.0/8'] },
    sessions: { livekit: { url: goneUrl, apiKey: fake.apiKey, apiSecret: fake.apiSecret } },
  });
  t.teardown(() => down.stop());
  const agent2 = await down.agent({ behaviour: { greeting: GREETING, greeting_mode: 'verbatim' } });
  const failed = await down.connect({ agent_id: agent2 });
  t.is(failed.status, 502, failed.text);
  t.is(failed.body.error_code, 'room_creation_failed');
  const calls2 = await down.call('GET', `/v1/agents/${agent2}/calls?limit=10`);
  t.like(calls2.body.data[0], { termination_reason: 'room_creation_failed' });
  t.is(calls2.body.data[0].metadata.room_provider, 'livekit');
});
