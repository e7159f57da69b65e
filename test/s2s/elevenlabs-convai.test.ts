/**
 * third_party mode with ElevenLabs Conversational AI: the plugin (SDK for the signed URL and the
 * agent check, `ws` for the conversation) against the local convai fake, a whole S2S pipeline
 * with the real human-portrait face and a MemoryMediaSink.
 */
import test, { type ExecutionContext } from 'ava';
import { Registry } from '../../core/index.ts';
import { createElevenLabsConvaiPlugin } from '../../plugins/elevenlabs-convai/index.ts';
import { startElevenLabsConvaiFake, type ElevenLabsConvaiFake, type ElevenLabsConvaiFakeOptions } from '../fakes/elevenlabs-convai.ts';
import { fakeBotVoice } from '../fakes/s2s-turns.ts';
import type { S2SAgentRecord } from '../../agent/s2s-pipeline.ts';
import { agentRecord, alignment, concatAudio, heardText, speechFrames, startS2SSession, to16k, userUtterance, wait, type S2SSession } from './harness.ts';
import { until } from '../../testing/until.ts';

const AGENT = 'agent_fake_ada';
const REPLY = 'Happy to help with that';

async function withFake(t: ExecutionContext, options: ElevenLabsConvaiFakeOptions = {}): Promise<ElevenLabsConvaiFake> {
  const fake = await startElevenLabsConvaiFake(options);
  t.teardown(() => fake.close());
  return fake;
}

const elAgent = (fields: Partial<S2SAgentRecord> = {}) => agentRecord({ sts_provider: 'elevenlabs-convai', sts_config_id: AGENT, ...fields });

async function session(t: ExecutionContext, fake: ElevenLabsConvaiFake, agent: S2SAgentRecord = elAgent(), extra: { apiKey?: string; reconnectAttempts?: number } = {}): Promise<S2SSession> {
  current = await startS2SSession(t, agent, {
    plugin: createElevenLabsConvaiPlugin({ baseUrl: fake.baseUrl, connectTimeoutMs: 5_000, turnGapMs: 400 }),
    apiKey: extra.apiKey ?? fake.apiKey,
    reconnectAttempts: extra.reconnectAttempts,
  });
  return current;
}

let current: S2SSession | undefined;
const connected = (fake: ElevenLabsConvaiFake, n = 1) =>
  until(() => fake.connections.length >= n && fake.connections.at(-1)!.sent.includes('conversation_initiation_metadata') && (!current || current.built.s2s.live !== undefined), { timeoutMs: 10_000, what: () => `connection ${n} set up (conversation_initiation_metadata); ${fake.connections.length} so far` });
/** The face played `turns` turns to their end: the output let their tts-stopped through and stopped speaking. */
const botDone = (s: S2SSession, turns = 1) => until(() => s.outOf(s.built.output.name).filter((f) => f.type === 'tts-stopped').length >= turns && !s.built.output.botSpeaking, { timeoutMs: 15_000, what: `the face to play ${turns} turn(s) to the end` });

test.serial('a user turn: transcripts arrive as frames, pings are answered, and the agent audio comes out of the face lip-synced (offset within 40 ms)', async (t) => {
  const agents = { [AGENT]: { name: 'Ada', firstMessage: null, outputFormat: 'pcm_22050', allowOverrides: false } };
  const fake = await withFake(t, { agents, replies: [REPLY], userTranscripts: ['can you help me'], pingIntervalMs: 100 });
  const s = await session(t, fake);
  await connected(fake);
  s.say(userUtterance(400, 700));
  await until(() => s.built.output.botSpeaking, { timeoutMs: 5_000, what: 'the bot to start speaking' });
  await botDone(s);
  t.true(s.all().some((f) => f.type === 'transcription' && f.final && f.text === 'can you help me'));
  const kinds = s.outOf(s.built.s2s.name).map((f) => f.type);
  t.true(kinds.indexOf('user-started-speaking') < kinds.indexOf('user-stopped-speaking'));
  t.true(kinds.indexOf('user-stopped-speaking') < kinds.indexOf('tts-started'));
  t.is(heardText(s), REPLY);
  t.true(s.all().some((f) => f.type === 'llm-text' && f.text === REPLY));

  const frames = speechFrames(s).filter((f) => f.type === 'speech' || f.type === 'speech-start');
  const reference = to16k(fakeBotVoice(REPLY, 22_050), 22_050);
  const { lagMs, correlation } = alignment(concatAudio(frames.map((f) => f.audio)), reference);
  t.true(correlation > 0.95, `r=${correlation.toFixed(3)}`);
  t.true(Math.abs(lagMs) <= 40, `A/V offset ${lagMs} ms`);
  t.true(Math.abs(frames.length * 640 - reference.length) <= 2 * 640);
  await wait(150);
  const pings = fake.connections[0]!.pongs;
  t.true(pings.length >= 1, 'pongs sent');
  t.deepEqual(s.errors(), []);
  await s.worker.end();
});

test.serial("barge-in: the interruption cancels the face at once; audio with event_id <= the interruption's is dropped, the next response plays", async (t) => {
  const long = Array.from({ length: 14 }, (_, i) => `part${i} more`).join(' ');
  const fake = await withFake(t, { replies: [long, 'Sure'], audioChunkMs: 100, chunkIntervalMs: 60, lateAudioAfterInterruption: 3 });
  const s = await session(t, fake);
  await connected(fake);
  s.say(userUtterance(300, 600));
  await until(() => s.built.output.botSpeaking, { timeoutMs: 5_000, what: 'the bot to start speaking' });
  await wait(800);
  await s.sayRealtime(userUtterance(300, 700));
  await until(() => fake.connections[0]!.interruptions.length === 1, { timeoutMs: 3_000, what: 'the interruption sent to the provider' });
  const interruptedId = fake.connections[0]!.interruptions[0]!;
  t.true(fake.lateAudio.length >= 1 && fake.lateAudio.every((id) => id <= interruptedId), 'stale audio was on the wire');

  const avatarEvents = s.observer.events.filter((e) => e.source === s.built.avatar!.name && e.direction === 'downstream');
  const cut = avatarEvents.findIndex((e) => e.frame.type === 'interruption');
  t.true(cut > 0, 'the face was interrupted');
  // The second response (a higher event id) plays after the cut.
  // The cut turn gets no tts-stopped (it was interrupted); the next one does.
  await until(() => heardText(s).endsWith('Sure') && s.outOf(s.built.output.name).some((f) => f.type === 'tts-stopped'), { timeoutMs: 8_000, what: () => `the turn to end with "Sure" played (heard "${heardText(s)}")` });
  const turns = s.all().filter((f) => f.type === 'tts-started').map((f) => (f.type === 'tts-started' ? f.contextId : ''));
  t.deepEqual(turns.length, 2);
  t.not(turns[1], `1/el-${interruptedId}`);
  const after = s.observer.events.filter((e) => e.source === s.built.avatar!.name && e.direction === 'downstream').slice(cut);
  const secondStart = after.findIndex((e) => e.frame.type === 'output-image' && e.frame.frameType === 'speech-start');
  t.true(secondStart > 0);
  // Between the cut and the next turn the face plays no speech: the stale chunks never reached it.
  t.is(after.slice(0, secondStart).filter((e) => e.frame.type === 'output-audio').length, 0);
  // What plays, without the silence an emitter starved by a loaded machine puts into it: whole
  // silent frames between chunks, and the padding of the frame an underrun cut short (its speech,
  // then zeros; a CI run under a CPU hog: 0.940, the rest of "Sure" 20 ms late). Zero samples
  // are taken out of both sides: this checks which response plays, not how smoothly.
  const voiced = (pcm: Int16Array) => pcm.filter((v) => v !== 0);
  const played = voiced(concatAudio(after.slice(secondStart).flatMap((e) => (e.frame.type === 'output-audio' ? [e.frame.pcm] : []))));
  // Compared over the response's own length: the silence after it depends on when this check runs.
  const sure = voiced(to16k(fakeBotVoice('Sure', 16_000), 16_000));
  const match = alignment(played.subarray(0, sure.length), sure);
  t.true(match.correlation > 0.95, `the next response is what plays (correlation ${match.correlation.toFixed(3)} at ${match.lagMs} ms)`);
  const heard = heardText(s).split(' ').slice(0, -1); // the cut turn's words, then 'Sure'
  t.true(heard.length < long.split(' ').length, `${heard.length} words of the cut turn reported heard`);
  t.deepEqual(heard, long.split(' ').slice(0, heard.length));
  await s.worker.end();
});

test.serial('with allow_interruption off, a provider interruption does not cut the face: what it holds plays out, the stale rest is not taken', async (t) => {
  const long = Array.from({ length: 14 }, (_, i) => `part${i} more`).join(' ');
  const fake = await withFake(t, { replies: [long, 'Sure'], audioChunkMs: 100, chunkIntervalMs: 60, lateAudioAfterInterruption: 3 });
  const s = await session(t, fake, elAgent({ behaviour: { allow_interruption: false } }));
  await connected(fake);
  s.say(userUtterance(300, 600));
  await until(() => s.built.output.botSpeaking, { timeoutMs: 5_000, what: 'the bot to start speaking' });
  await wait(800);
  await s.sayRealtime(userUtterance(300, 700));
  await until(() => fake.connections[0]!.interruptions.length === 1, { timeoutMs: 3_000, what: 'the interruption sent to the provider' });
  await botDone(s, 2);
  t.false(s.all().some((f) => f.type === 'interruption'));
  t.is(s.sink.clears, 0);
  const fedFirst = s.built.playout.fedMs(`1/el-${fake.connections[0]!.interruptions[0]}`);
  const fullMs = (fakeBotVoice(long, 16_000).length / 16_000) * 1000;
  t.true(fedFirst > 0 && fedFirst < fullMs - 1_000, `the rest of the interrupted response was not taken (${Math.round(fedFirst)} of ${Math.round(fullMs)} ms)`);
  await s.worker.end();
});

test.serial('the agent first message is spoken at the start; our agent fields are not sent without override_agent_settings', async (t) => {
  const agents = { [AGENT]: { name: 'Ada', firstMessage: 'Welcome back', outputFormat: 'pcm_16000', allowOverrides: false } };
  const fake = await withFake(t, { agents });
  const s = await session(t, fake, elAgent({ starts_conversation: true, behaviour: { greeting: 'Hi there' }, voice_id: 'voice123' }));
  await until(() => heardText(s) === 'Welcome back', { timeoutMs: 5_000, what: () => `"Welcome back" to be played (heard "${heardText(s)}")` });
  t.deepEqual(fake.connections[0]!.initiation, { type: 'conversation_initiation_client_data' });
  await s.worker.end();
});

test.serial('override_agent_settings sends prompt, language, voice and greeting; an agent that forbids overrides ends the session with sts_bad_config', async (t) => {
  const agents = {
    [AGENT]: { name: 'Ada', firstMessage: null, outputFormat: 'pcm_16000', allowOverrides: true },
    agent_locked: { name: 'Locked', firstMessage: null, outputFormat: 'pcm_16000', allowOverrides: false },
  };
  const fake = await withFake(t, { agents });
  const fields = { language: 'de', voice_id: 'voice123', starts_conversation: true, behaviour: { greeting: 'Guten Tag' }, provider_config: { override_agent_settings: true, dynamic_variables: { user_name: 'Ana' } } };
  const s = await session(t, fake, elAgent(fields));
  await until(() => heardText(s) === 'Guten Tag', { timeoutMs: 5_000, what: () => `"Guten Tag" to be played (heard "${heardText(s)}")` });
  t.deepEqual(fake.connections[0]!.initiation, {
    type: 'conversation_initiation_client_data',
    conversation_config_override: { agent: { prompt: { prompt: 'You are Ada, a friendly guide.' }, language: 'de', first_message: 'Guten Tag' }, tts: { voice_id: 'voice123' } },
    dynamic_variables: { user_name: 'Ana' },
  });
  await s.worker.end();

  const locked = await session(t, fake, elAgent({ ...fields, sts_config_id: 'agent_locked' }));
  await locked.outcome;
  t.like(locked.errors()[0], { fatal: true, code: 'sts_bad_config' });
  t.regex(locked.errors()[0]!.message, /Override for field 'prompt' is not allowed/);
});

test.serial('a reconnect mid-call overrides the first message with none: the agent does not greet again', async (t) => {
  const agents = { [AGENT]: { name: 'Ada', firstMessage: 'Hello from the ElevenLabs agent', outputFormat: 'pcm_16000', allowOverrides: true } };
  const fake = await withFake(t, { agents });
  const fields = { starts_conversation: true, behaviour: { greeting: 'Guten Tag' }, provider_config: { override_agent_settings: true } };
  const s = await session(t, fake, elAgent(fields), { reconnectAttempts: 2 });
  await connected(fake);
  t.like(fake.connections[0]!.initiation, { conversation_config_override: { agent: { first_message: 'Guten Tag' } } });
  fake.dropAll();
  await connected(fake, 2);
  t.like(fake.connections[1]!.initiation, { conversation_config_override: { agent: { first_message: '' } } }, 'no greeting, not even the agent\'s own');
  await s.worker.end();
});

test.serial('appended system context is sent as a contextual_update', async (t) => {
  const fake = await withFake(t);
  const s = await session(t, fake);
  await connected(fake);
  s.built.s2s.appendSystemContext('The visitor is on the pricing page.');
  await until(() => fake.connections[0]!.messages.some((m) => m.type === 'contextual_update'), { timeoutMs: 10_000, what: 'the contextual_update at the provider' });
  t.deepEqual(fake.connections[0]!.messages.filter((m) => m.type === 'contextual_update'), [{ type: 'contextual_update', text: 'The visitor is on the pricing page.' }]);
  await s.worker.end();
});

test.serial('a refused key ends the session with sts_auth_failed; an unknown agent id with sts_config_not_found; the key is in no frame', async (t) => {
  const fake = await withFake(t);
  const key = 'xi-wrong-key-never-leaked';
  const s = await session(t, fake, elAgent(), { apiKey: key });
  await s.outcome;
  t.like(s.errors()[0], { fatal: true, code: 'sts_auth_failed' });
  t.regex(s.errors()[0]!.message, /Invalid API key/);
  t.false(JSON.stringify(s.all().map((f) => ({ ...f, cause: undefined }))).includes(key));
  const unknown = await session(t, fake, elAgent({ sts_config_id: 'agent_nobody' }));
  await unknown.outcome;
  t.like(unknown.errors()[0], { fatal: true, code: 'sts_config_not_found' });
  t.regex(unknown.errors()[0]!.message, /agent_nobody/);
  const none = await session(t, fake, elAgent({ sts_config_id: null }));
  await none.outcome;
  t.like(none.errors()[0], { fatal: true, code: 'sts_config_not_found' });
});

test.serial('a dropped conversation: the turn ends with what was received, a new conversation starts with the transcript as context', async (t) => {
  const fake = await withFake(t, { replies: ['this answer is cut by a network drop', 'second'], userTranscripts: ['first question', 'second question'], dropAfterChunks: 3 });
  const s = await session(t, fake, elAgent(), { reconnectAttempts: 2 });
  await connected(fake);
  s.say(userUtterance(300, 600));
  await until(() => s.errors().some((e) => e.code === 'sts_reconnected'), { timeoutMs: 5_000, what: 'the sts_reconnected error frame' });
  await connected(fake, 2);
  await botDone(s);
  const context = fake.connections[1]!.messages.find((m) => m.type === 'contextual_update');
  t.regex(context.text, /User: first question/);
  fake.setFaults({ dropAfterChunks: undefined });
  s.say(userUtterance(300, 600));
  await botDone(s, 2);
  await s.worker.end();
});

test.serial('a conversation that cannot come back ends the session with sts_connection_lost', async (t) => {
  const fake = await withFake(t);
  const s = await session(t, fake, elAgent(), { reconnectAttempts: 1 });
  await connected(fake);
  await fake.close();
  await s.outcome;
  t.like(s.errors().find((e) => e.fatal), { code: 'sts_connection_lost' });
});

test.serial('a malformed message is skipped: the turn plays on', async (t) => {
  const fake = await withFake(t, { replies: [REPLY], malformedAt: 2 });
  const s = await session(t, fake);
  await connected(fake);
  s.say(userUtterance(300, 600));
  await botDone(s);
  t.deepEqual(s.errors(), []);
  t.is(heardText(s), REPLY);
  await s.worker.end();
});

test.serial('a client tool call from the ElevenLabs agent is answered with an error result and never dispatched', async (t) => {
  const fake = await withFake(t);
  const tools = [{ tool_id: 't1', enabled: true, type: 'function' as const, function: { name: 'lookup', description: 'd', parameters: { properties: {} } }, delivery: { mode: 'client' as const } }];
  const s = await session(t, fake, elAgent({ tools: tools as any }));
  await connected(fake);
  fake.sendToolCall('lookup', { q: 'x' });
  await until(() => fake.connections[0]!.messages.some((m) => m.type === 'client_tool_result'), { timeoutMs: 10_000, what: 'the client_tool_result at the provider' });
  t.like(fake.connections[0]!.messages.find((m) => m.type === 'client_tool_result'), { tool_call_id: 'call_1', is_error: true });
  t.like(s.errors()[0], { fatal: false, code: 'sts_tool_call_refused' });
  t.false(s.all().some((f) => f.type === 'tool-calls' || f.type === 'tool-call-in-progress' || (f.type === 'client-message' && f.message.type === 'tool-call')));
  t.deepEqual(s.built.toolset.definitions, []);
  await s.worker.end();
});

test.serial('unexpected and malformed messages of every shape never end the conversation', async (t) => {
  const fake = await withFake(t, { replies: [REPLY] });
  const s = await session(t, fake);
  await connected(fake);
  for (const raw of [
  'null', '42', '"text"', '[]', '{}', '{"type":5}', '{"type":"audio"}', '{"type":"audio","audio_event":{"audio_base_64":5,"event_id":"x"}}',
  '{"type":"audio","audio_event":{"audio_base_64":"AAAA"}}', '{"type":"interruption"}', '{"type":"interruption","interruption_event":{"event_id":"abc"}}',
  '{"type":"agent_response","agent_response_event":{"agent_response":7}}', '{"type":"user_transcript","user_transcription_event":null}',
  '{"type":"ping"}', '{"type":"vad_score","vad_score_event":{"vad_score":"high"}}', '{"type":"client_tool_call"}',
  '{"type":"error"}', '{"type":"conversation_initiation_metadata"}', '{"type":"brand_new_event","x":{}}', '{"type":"audio",',
]) fake.injectRaw(raw);
  s.say(userUtterance(300, 600));
  await botDone(s);
  t.is(heardText(s), REPLY);
  t.deepEqual(s.errors().filter((e) => e.fatal), []);
  t.is(fake.connections.length, 1);
  await s.worker.end();
});

test.serial('verify answers valid for a good key and agent, invalid for a refused key or an unknown agent', async (t) => {
  const fake = await withFake(t);
  const registry = new Registry().use(createElevenLabsConvaiPlugin({ baseUrl: fake.baseUrl }));
  const verify = (registry.info('sts', 'elevenlabs-convai').descriptor as any).verify;
  t.deepEqual(await verify({ apiKey: fake.apiKey, configId: AGENT, providerConfig: {} }), { valid: true });
  const bad = await verify({ apiKey: 'nope', configId: AGENT, providerConfig: {} });
  t.false(bad.valid);
  t.regex(bad.error, /authentication failed: Invalid API key/);
  const unknown = await verify({ apiKey: fake.apiKey, configId: 'agent_nobody', providerConfig: {} });
  t.false(unknown.valid);
  t.regex(unknown.error, /agent_nobody/);
  t.deepEqual(fake.restRequests.map((r) => r.path), ['/v1/convai/agents/agent_fake_ada', '/v1/convai/agents/agent_fake_ada', '/v1/convai/agents/agent_nobody']);
});
