/**
 * A third_party agent through the Session API: the provider's conversation (the OpenAI Realtime
 * wire fake, reached through the real SDK), our face on it, a headless WebRTC visitor. The
 * provider key is stored encrypted through the REST API, decrypted only for the session, and
 * never reaches the visitor; a refused key ends the session `failed` with the provider's code.
 */
import test from 'ava';
import { createElevenLabsConvaiPlugin } from '../../plugins/elevenlabs-convai/index.ts';
import { createOpenAIRealtimePlugin } from '../../plugins/openai-realtime/index.ts';
import { RoomVisitor } from '../agent/room-visitor.ts';
import { holdsWithin, until } from '../../testing/until.ts';
import { startElevenLabsConvaiFake, type ElevenLabsConvaiFake } from '../fakes/elevenlabs-convai.ts';
import { startOpenAIRealtimeFake, type OpenAIRealtimeFake } from '../fakes/openai-realtime.ts';
import { roomOf, startSessionServer, type SessionTestServer } from './session-harness.ts';

const EL_AGENT = 'agent_fake_ada';
const LONG = Array.from({ length: 14 }, (_, i) => `sentence${i} word`).join(' ');
let fake: OpenAIRealtimeFake;
let el: ElevenLabsConvaiFake;
let s: SessionTestServer;

test.before(async () => {
  fake = await startOpenAIRealtimeFake({ replies: ['Welcome aboard, I am Ada.', 'Sunny and warm all day.'], userTranscripts: ['what is the weather'] });
  el = await startElevenLabsConvaiFake({
    agents: { [EL_AGENT]: { name: 'Ada', firstMessage: 'Hi, this is the ElevenLabs Ada.', outputFormat: 'pcm_22050', allowOverrides: false } },
    replies: ['Happy to help with that'], userTranscripts: ['can you help me'],
  });
  s = await startSessionServer('session_third_party', {
    plugins: [createOpenAIRealtimePlugin({ baseURL: fake.baseURL, tls: { ca: fake.ca } }), createElevenLabsConvaiPlugin({ baseUrl: el.baseUrl, connectTimeoutMs: 5_000, turnGapMs: 400 })],
  });
});
test.after.always(async () => {
  await s?.stop();
  await fake?.close();
  await el?.close();
});

/** A tone burst followed by silence: speech to the fakes' energy detectors. */
function burst(toneMs: number, silenceMs: number): Int16Array {
  const pcm = new Int16Array(((toneMs + silenceMs) * 16_000) / 1000);
  for (let i = 0; i < (toneMs * 16_000) / 1000; i++) pcm[i] = Math.round(9000 * Math.sin((2 * Math.PI * 220 * i) / 16_000));
  return pcm;
}

async function thirdPartyAgent(apiKey: string): Promise<string> {
  return s.agent({ mode: 'third_party', sts_provider: 'openai-realtime', sts_api_key: apiKey, provider_config: {}, behaviour: { greeting: 'Welcome aboard, I am Ada.' } });
}

test.serial('a third_party session: the provider greets and answers through our face; the key never reaches the page', async (t) => {
  const agentId = await thirdPartyAgent(fake.apiKey);
  const agent = (await s.call('GET', `/v1/agents/${agentId}`)).body;
  t.true(agent.sts_api_key_set);
  t.false(JSON.stringify(agent).includes(fake.apiKey));
  const res = await s.connect({ agent_id: agentId, client_user_ref: 'tp-visitor' });
  t.is(res.status, 200, res.text);
  const visitor = await RoomVisitor.join(res.body.room_url, res.body.token);
  try {
    await until(() => visitor.connectionState === 'connected' && visitor.videoFrames > 5, { timeoutMs: 20_000, intervalMs: 20, what: 'the visitor connected with the face arriving' });
    const readyAt = Date.now();
    visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
    const botTurns = () => visitor.ofType('transcript-turn').filter((m) => m.owner === 'bot');
    await until(() => botTurns().length >= 1, { timeoutMs: 20_000, intervalMs: 20, what: 'the greeting turn' });
    t.is(botTurns()[0]!.text, 'Welcome aboard, I am Ada.');
    t.true(visitor.audibleMs(readyAt) > 300, 'the provider audio is heard through the room');
    visitor.say(burst(500, 600));
    await until(() => botTurns().length >= 2, { timeoutMs: 20_000, intervalMs: 20, what: 'the answer turn' });
    t.like(visitor.ofType('transcript-turn').find((m) => m.owner === 'user'), { text: 'what is the weather' });
    t.is(botTurns()[1]!.text, 'Sunny and warm all day.');
    t.false(JSON.stringify(visitor.messages).includes(fake.apiKey), 'the provider key never reaches the page');
    t.deepEqual((await s.release(roomOf(res.body.room_url))).body, { released: 1 });
    const call = await s.endedCallOf(agentId, res.body.session_id);
    t.like(call, { status: 'completed', termination_reason: 'client_released', client_user_ref: 'tp-visitor', participant_count: 1 });
  } finally {
    visitor.close();
  }
});

test.serial('a refused provider key ends the session failed with the provider code, told to the page', async (t) => {
  const agentId = await thirdPartyAgent('sk-refused-by-the-provider');
  const res = await s.connect({ agent_id: agentId });
  t.is(res.status, 200, res.text);
  const visitor = await RoomVisitor.join(res.body.room_url, res.body.token);
  try {
    await holdsWithin(() => visitor.connectionState === 'connected', { timeoutMs: 20_000, intervalMs: 20 });
    visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
    await until(() => visitor.ofType('session-ended').length === 1, { timeoutMs: 20_000, intervalMs: 20, what: () => `session-ended at the visitor; messages: ${JSON.stringify(visitor.messages.map((m) => m.message))}` });
    t.like(visitor.ofType('error').find((m) => m.fatal === true), { code: 'sts_auth_failed' });
    t.deepEqual(visitor.ofType('session-ended')[0], { type: 'session-ended', reason: 'pipeline_error' });
    const call = await s.endedCallOf(agentId, res.body.session_id);
    t.like(call, { status: 'failed', termination_reason: 'pipeline_error', failure_reason: 'sts_auth_failed' });
    t.truthy(call.metadata.failure_detail);
    t.false(JSON.stringify(call).includes('sk-refused-by-the-provider'));
  } finally {
    visitor.close();
  }
});

test.serial('barge-in in a third_party session: the face is cut, the page hears the cut, and OpenAI gets the truncation at the played position', async (t) => {
  const agentId = await thirdPartyAgent(fake.apiKey);
  const res = await s.connect({ agent_id: agentId });
  t.is(res.status, 200, res.text);
  const visitor = await RoomVisitor.join(res.body.room_url, res.body.token);
  const connectionsBefore = fake.connections.length;
  try {
    await holdsWithin(() => visitor.connectionState === 'connected', { timeoutMs: 20_000, intervalMs: 20 });
    visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
    const botTurns = () => visitor.ofType('transcript-turn').filter((m) => m.owner === 'bot');
    await until(() => botTurns().length >= 1, { timeoutMs: 20_000, intervalMs: 20, what: 'the greeting turn' });
    fake.enqueue(LONG);
    visitor.say(burst(400, 700));
    const before = visitor.messages.length;
    await until(() => visitor.messages.slice(before).some((m) => m.message.type === 'bot-started-speaking'), { timeoutMs: 20_000, intervalMs: 20, what: 'the long answer to start' });
    // Barge in once the page has heard half a second of the answer (not after a fixed time: on a
    // loaded machine a fixed time may hold less audio, or all of it).
    const speakingSince = Date.now();
    await until(() => visitor.audibleMs(speakingSince) >= 500, { timeoutMs: 20_000, intervalMs: 20, what: 'half a second of the answer heard' });
    const heard = visitor.audibleMs(speakingSince);
    visitor.say(burst(400, 700));
    const connection = fake.connections[connectionsBefore]!;
    await until(() => connection.truncates.length >= 1, { timeoutMs: 10_000, intervalMs: 20, what: 'a truncate at the provider' });
    const truncate = connection.truncates[0]!;
    // The played position: at least what the page heard before barging in, short of what the
    // provider generated (the whole item came at once, so a generated position would be its end).
    t.true(truncate.audio_end_ms >= heard && truncate.audio_end_ms < truncate.itemAudioMs, `played ${truncate.audio_end_ms} of ${truncate.itemAudioMs} ms, ${heard} ms heard before the barge-in`);
    await until(() => visitor.ofType('bot-tts-stopped').some((m) => m.interrupted === true), { timeoutMs: 10_000, intervalMs: 20, what: 'bot-tts-stopped (interrupted) at the page' });
    const cutTurn = botTurns().at(-1)!;
    t.true(String(cutTurn.text).split(' ').length < LONG.split(' ').length, `the cut turn lists only words played: ${cutTurn.text}`);
    t.true(LONG.startsWith(String(cutTurn.text)));
    await s.release(roomOf(res.body.room_url));
  } finally {
    visitor.close();
  }
});

test.serial('an ElevenLabs Conversational AI agent through the Session API: its first message and answer through our face', async (t) => {
  const agentId = await s.agent({ mode: 'third_party', sts_provider: 'elevenlabs-convai', sts_config_id: EL_AGENT, sts_api_key: el.apiKey, provider_config: {} });
  const res = await s.connect({ agent_id: agentId });
  t.is(res.status, 200, res.text);
  const visitor = await RoomVisitor.join(res.body.room_url, res.body.token);
  try {
    await holdsWithin(() => visitor.connectionState === 'connected', { timeoutMs: 20_000, intervalMs: 20 });
    const readyAt = Date.now();
    visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
    const botTurns = () => visitor.ofType('transcript-turn').filter((m) => m.owner === 'bot');
    await until(() => botTurns().length >= 1, { timeoutMs: 20_000, intervalMs: 20, what: () => `the greeting turn; messages: ${JSON.stringify(visitor.messages.map((m) => m.message.type))}` });
    t.is(botTurns()[0]!.text, 'Hi, this is the ElevenLabs Ada.');
    t.true(visitor.audibleMs(readyAt) > 300);
    visitor.say(burst(500, 700));
    await until(() => botTurns().length >= 2, { timeoutMs: 20_000, intervalMs: 20, what: 'the answer turn' });
    t.like(visitor.ofType('transcript-turn').find((m) => m.owner === 'user'), { text: 'can you help me' });
    t.is(botTurns()[1]!.text, 'Happy to help with that');
    t.false(JSON.stringify(visitor.messages).includes(el.apiKey));
    await s.release(roomOf(res.body.room_url));
  } finally {
    visitor.close();
  }
});

test.serial('verify-provider answers for both providers through the REST API, with the stored keys', async (t) => {
  const openai = await thirdPartyAgent(fake.apiKey);
  t.like((await s.call('POST', `/v1/agents/${openai}/verify-provider`)).body, { valid: true, provider: 'openai-realtime' });
  const openaiBad = await thirdPartyAgent('sk-wrong');
  const bad = (await s.call('POST', `/v1/agents/${openaiBad}/verify-provider`)).body;
  t.like(bad, { valid: false, provider: 'openai-realtime' });
  t.is(typeof bad.error, 'string');
  const eleven = await s.agent({ mode: 'third_party', sts_provider: 'elevenlabs-convai', sts_config_id: EL_AGENT, sts_api_key: el.apiKey });
  t.like((await s.call('POST', `/v1/agents/${eleven}/verify-provider`)).body, { valid: true, provider: 'elevenlabs-convai' });
  const unknownAgent = await s.agent({ mode: 'third_party', sts_provider: 'elevenlabs-convai', sts_config_id: 'agent_nobody', sts_api_key: el.apiKey });
  t.like((await s.call('POST', `/v1/agents/${unknownAgent}/verify-provider`)).body, { valid: false, provider: 'elevenlabs-convai' });
});
