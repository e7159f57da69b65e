/**
 * third_party mode with OpenAI Realtime: the plugin through the openai SDK's realtime WebSocket
 * client against the local realtime fake (TLS, real event names), a whole S2S pipeline with the
 * real human-portrait face and a MemoryMediaSink.
 */
import test from 'ava';
import { createOpenAIRealtimePlugin } from '../../plugins/openai-realtime/index.ts';
import { startOpenAIRealtimeFake, type OpenAIRealtimeFake, type OpenAIRealtimeFakeOptions } from '../fakes/openai-realtime.ts';
import { fakeBotVoice } from '../fakes/s2s-turns.ts';
import { agentRecord, alignment, concatAudio, heardText, speechFrames, startS2SSession, to16k, userUtterance, wait, type S2SSession } from './harness.ts';
import { until } from '../../testing/until.ts';
import type { ExecutionContext } from 'ava';
import type { S2SAgentRecord } from '../../agent/s2s-pipeline.ts';

const REPLY = 'Sunny and warm all day today';

async function withFake(t: ExecutionContext, options: OpenAIRealtimeFakeOptions = {}): Promise<OpenAIRealtimeFake> {
  const fake = await startOpenAIRealtimeFake(options);
  t.teardown(() => fake.close());
  return fake;
}

async function session(t: ExecutionContext, fake: OpenAIRealtimeFake, agent: S2SAgentRecord = agentRecord(), extra: { apiKey?: string; reconnectAttempts?: number; withFace?: boolean } = {}): Promise<S2SSession> {
  current = await startS2SSession(t, agent, {
    plugin: createOpenAIRealtimePlugin({ baseURL: fake.baseURL, tls: { ca: fake.ca }, connectTimeoutMs: 5_000 }),
    apiKey: extra.apiKey ?? fake.apiKey,
    reconnectAttempts: extra.reconnectAttempts,
    withFace: extra.withFace,
  });
  return current;
}

/** The fake sent session.updated for the n-th connection and the last session has it in hand. */
let current: S2SSession | undefined;
const connected = (fake: OpenAIRealtimeFake, n = 1) =>
  until(() => fake.connections.length >= n && fake.connections.at(-1)!.sent.includes('session.updated') && (!current || current.built.s2s.live !== undefined), { timeoutMs: 10_000, what: () => `connection ${n} set up (session.updated); ${fake.connections.length} so far` });
/** The face played the turn to its end: the output let the turn's tts-stopped through and stopped speaking. */
const botDone = (s: S2SSession) => until(() => s.outOf(s.built.output.name).some((f) => f.type === 'tts-stopped') && !s.built.output.botSpeaking, { timeoutMs: 15_000, what: 'the face to play the turn to its end' });

test.serial('a user turn: transcripts arrive as frames and the provider audio comes out of the face lip-synced (each frame is the provider audio, offset within 40 ms)', async (t) => {
  const fake = await withFake(t, { replies: [REPLY], userTranscripts: ['what is the weather'] });
  const s = await session(t, fake);
  await connected(fake);
  s.say(userUtterance(400, 700));
  await until(() => s.built.output.botSpeaking, { timeoutMs: 5_000, what: 'the bot to speak' });
  await botDone(s);

  const transcripts = s.all().filter((f) => f.type === 'transcription');
  t.true(transcripts.some((f) => f.type === 'transcription' && f.final && f.text === 'what is the weather'));
  const kinds = s.outOf(s.built.s2s.name).map((f) => f.type);
  for (const k of ['user-started-speaking', 'user-stopped-speaking', 'llm-response-start', 'tts-started', 'tts-audio', 'llm-text', 'tts-stopped', 'llm-response-end'] as const) t.true(kinds.includes(k), k);
  t.true(kinds.indexOf('user-stopped-speaking') < kinds.indexOf('tts-started'));
  t.is(heardText(s), REPLY, 'every word is reported heard');
  // Words are reported as they play, not all at the end of the turn.
  const order = s.all().filter((f) => f.type === 'tts-text' || f.type === 'bot-stopped-speaking').map((f) => f.type);
  t.true(order.filter((x) => x === 'tts-text').length >= 2 && order[0] === 'tts-text', order.join(' '));

  // Every speech frame carries its image and 40 ms of audio; together they are the provider's audio.
  const frames = speechFrames(s).filter((f) => f.type === 'speech' || f.type === 'speech-start');
  const reference = to16k(fakeBotVoice(REPLY, 24_000), 24_000);
  t.true(Math.abs(frames.length * 640 - reference.length) <= 2 * 640, `${frames.length} frames for ${reference.length} samples`);
  const played = concatAudio(frames.map((f) => f.audio));
  const { lagMs, correlation } = alignment(played, reference);
  t.true(correlation > 0.95, `played audio is the provider's (r=${correlation.toFixed(3)})`);
  t.true(Math.abs(lagMs) <= 40, `A/V offset ${lagMs} ms`);
  // Per frame: each 40 ms slice matches the provider audio at its own position.
  let checked = 0;
  for (let k = 0; k < frames.length - 1; k++) {
    const ref = reference.subarray(k * 640 + Math.round(lagMs * 16), (k + 1) * 640 + Math.round(lagMs * 16));
    if (ref.length < 640 || ref.every((v) => Math.abs(v) < 200)) continue;
    t.true(alignment(frames[k]!.audio, ref, 0).correlation > 0.9, `frame ${k}`);
    checked++;
  }
  t.true(checked > 10);
  t.true(s.sink.audioMs >= frames.length * 40 - 40, 'the sink played the face audio');
  // Usage and first-audio latency reach the worker as metrics.
  const metrics = s.all().filter((f) => f.type === 'metrics').flatMap((f) => (f.type === 'metrics' ? f.data : []));
  t.true(metrics.some((m) => m.kind === 'usage' && m.counters.output_audio_tokens! > 0));
  t.true(metrics.some((m) => m.kind === 'ttfb'));
  t.deepEqual(s.errors(), []);
  await s.worker.end();
});

test.serial('the agent maps onto the GA session: instructions with the language pin, voice, semantic VAD from provider_config, interruption setting, input transcription', async (t) => {
  const fake = await withFake(t);
  const agent = agentRecord({ language: 'fr', voice_id: 'coral', provider_config: { turn_detection: { type: 'semantic_vad', eagerness: 'low' } }, behaviour: { allow_interruption: false } });
  const s = await session(t, fake, agent);
  await connected(fake);
  const update = fake.connections[0]!.events.find((e) => e.type === 'session.update')!;
  t.is(update.session.type, 'realtime');
  t.deepEqual(update.session.output_modalities, ['audio']);
  t.regex(update.session.instructions, /^You are Ada, a friendly guide\.\n\nAlways respond in French/);
  t.deepEqual(update.session.audio.input.format, { type: 'audio/pcm', rate: 24_000 });
  t.deepEqual(update.session.audio.output, { format: { type: 'audio/pcm', rate: 24_000 }, voice: 'coral' });
  t.like(update.session.audio.input.turn_detection, { type: 'semantic_vad', eagerness: 'low', create_response: true, interrupt_response: false });
  t.like(update.session.audio.input.transcription, { language: 'fr' });
  t.false('tools' in update.session, 'no tools are offered');
  t.false(s.built.workerOptions.allowInterruptions);
  t.is(fake.connections[0]!.model, 'gpt-realtime');
  await s.worker.end();
});

test.serial('a provider voice_id that is not an OpenAI voice name is not sent; provider_config.voice wins over voice_id', async (t) => {
  const fake = await withFake(t);
  const s1 = await session(t, fake, agentRecord({ voice_id: '21m00Tcm4TlvDq8ikWAM' }));
  await connected(fake, 1);
  t.false('voice' in fake.connections[0]!.events.find((e) => e.type === 'session.update')!.session.audio.output);
  await s1.worker.end();
  const s2 = await session(t, fake, agentRecord({ voice_id: 'coral', provider_config: { voice: 'marin' } }));
  await connected(fake, 2);
  t.is(fake.connections[1]!.events.find((e) => e.type === 'session.update')!.session.audio.output.voice, 'marin');
  await s2.worker.end();
});

test.serial('starts_conversation: the provider greets first with the verbatim greeting', async (t) => {
  const fake = await withFake(t, { replies: ['Hello I am Ada'] });
  const s = await session(t, fake, agentRecord({ starts_conversation: true, behaviour: { greeting: 'Hello! I am Ada.' } }));
  await connected(fake);
  await until(() => s.built.output.botSpeaking, { timeoutMs: 5_000, what: 'the bot to start speaking' });
  const create = fake.connections[0]!.events.find((e) => e.type === 'response.create');
  t.regex(create.response.instructions, /Hello! I am Ada\./);
  await s.worker.cancel();
});

test.serial('starts_conversation: a reconnect mid-call does not greet again (no response.create on the new connection)', async (t) => {
  const fake = await withFake(t, { replies: ['Hello I am Ada'] });
  const s = await session(t, fake, agentRecord({ starts_conversation: true, behaviour: { greeting: 'Hello! I am Ada.' } }), { reconnectAttempts: 2 });
  await connected(fake);
  await until(() => fake.connections[0]!.events.some((e) => e.type === 'response.create'), { timeoutMs: 10_000, what: 'the greeting on the first connection' });
  fake.dropAll();
  await connected(fake, 2);
  // Everything the reconnect sends has arrived once its session.update has (sent first, then the history).
  await until(() => fake.connections[1]!.events.some((e) => e.type === 'session.update'), { timeoutMs: 10_000, what: 'the second connection set up' });
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.false(fake.connections[1]!.events.some((e) => e.type === 'response.create'), 'no second greeting');
  await s.worker.end();
});

test.serial('barge-in: the face turn is cancelled at once, late provider audio is dropped, and the truncation carries the played position, not the bytes received', async (t) => {
  const long = Array.from({ length: 14 }, (_, i) => `sentence${i} word`).join(' ');
  // Deltas of 100 ms every 60 ms: the response is still streaming when the user barges in.
  const fake = await withFake(t, { replies: [long], audioChunkMs: 100, deltaIntervalMs: 60, lateDeltasAfterCancel: 3 });
  const s = await session(t, fake);
  await connected(fake);
  s.say(userUtterance(300, 600));
  await until(() => s.built.output.botSpeaking, { timeoutMs: 5_000, what: 'the bot to start speaking' });
  await wait(1_000);
  const framesBefore = speechFrames(s).length;
  await s.sayRealtime(userUtterance(200, 0));
  await until(() => fake.connections[0]!.truncates.length === 1, { timeoutMs: 3_000, what: 'a truncate sent to the provider' });
  const truncate = fake.connections[0]!.truncates[0]!;
  // What the user heard is what the output wrote to the sink (the face's paired audio, paced).
  const playedMs = s.sink.audioMs;
  t.true(Math.abs(truncate.audio_end_ms - playedMs) <= 60, `audio_end_ms ${truncate.audio_end_ms} vs ${playedMs} ms written by the output`);
  t.true(truncate.audio_end_ms >= 500 && truncate.audio_end_ms < 2_500, `${truncate.audio_end_ms} ms after ~1 s of playout`);
  t.true(truncate.itemAudioMs - truncate.audio_end_ms > 2_000, 'far less than the audio the provider sent');
  t.true(speechFrames(s).length >= framesBefore);

  // The face went back to idle quickly and played nothing more of the cut turn.
  const cutAt = s.all().findIndex((f) => f.type === 'interruption');
  t.true(cutAt >= 0);
  await wait(600);
  const after = s.outOf(s.built.avatar!.name).filter((f) => f.type === 'output-image').map((f) => (f.type === 'output-image' ? f.frameType : ''));
  const idleAt = after.lastIndexOf('speech') + 1;
  t.true(after.slice(idleAt).includes('idle'));
  // Deltas the provider had in flight when it cancelled arrived, and none of them played.
  t.true(fake.timeline.filter((e) => e.kind === 'late-delta').length >= 1, 'late deltas were sent');
  const avatarEvents = s.observer.events.filter((e) => e.source === s.built.avatar!.name && e.direction === 'downstream');
  const cut = avatarEvents.findIndex((e) => e.frame.type === 'interruption');
  const speechAfter = avatarEvents.slice(cut).filter((e) => e.frame.type === 'output-audio');
  t.true(speechAfter.length <= 1, `${speechAfter.length} speech frames after the interruption`);
  t.false(s.built.output.botSpeaking);
  const heard = heardText(s).split(' ');
  t.true(heard.length >= 1 && heard.length < long.split(' ').length, `only the words played are reported heard (${heard.length})`);
  t.deepEqual(heard, long.split(' ').slice(0, heard.length));
  await s.worker.end();
});

test.serial('an interruption from our side (e.g. a client request) cancels the provider response and truncates at the played position', async (t) => {
  const long = Array.from({ length: 12 }, (_, i) => `clause${i} here`).join(' ');
  const fake = await withFake(t, { replies: [long], audioChunkMs: 100, deltaIntervalMs: 60 });
  const s = await session(t, fake);
  await connected(fake);
  s.say(userUtterance(300, 600));
  await until(() => s.built.output.botSpeaking, { timeoutMs: 5_000, what: 'the bot to start speaking' });
  await wait(600);
  s.worker.interrupt();
  await until(() => fake.connections[0]!.truncates.length === 1, { timeoutMs: 3_000, what: 'a truncate sent to the provider' });
  const types = fake.connections[0]!.events.map((e) => e.type);
  t.true(types.indexOf('response.cancel') >= 0 && types.indexOf('response.cancel') < types.indexOf('conversation.item.truncate'), 'cancel, then truncate');
  const played = s.sink.audioMs;
  t.true(Math.abs(fake.connections[0]!.truncates[0]!.audio_end_ms - played) <= 60, `${fake.connections[0]!.truncates[0]!.audio_end_ms} vs ${played} ms written by the output`);
  t.true(fake.timeline.some((e) => e.kind === 'cancelled'));
  await s.worker.end();
});

test.serial('appended system context becomes a system item, without a response, and is re-sent after a reconnect', async (t) => {
  const fake = await withFake(t);
  const s = await session(t, fake, agentRecord(), { reconnectAttempts: 2 });
  await connected(fake);
  s.built.s2s.appendSystemContext('The visitor is on the pricing page.');
  const systemItems = (i: number) => fake.connections[i]!.events.filter((e) => e.type === 'conversation.item.create' && e.item.role === 'system').map((e) => e.item.content[0].text);
  await until(() => systemItems(0).length === 1, { timeoutMs: 10_000, what: 'the system item on the first connection' });
  t.deepEqual(systemItems(0), ['The visitor is on the pricing page.']);
  t.false(fake.connections[0]!.events.some((e) => e.type === 'response.create'));
  fake.dropAll();
  await connected(fake, 2);
  await until(() => systemItems(1).length === 1, { timeoutMs: 10_000, what: 'the system item re-sent on the second connection' });
  await s.worker.end();
});

test.serial('a refused key ends the session with sts_auth_failed, and the key appears in no frame', async (t) => {
  const fake = await withFake(t);
  const key = 'sk-wrong-key-should-never-leak-0000';
  const s = await session(t, fake, agentRecord(), { apiKey: key });
  const outcome: any = await s.outcome;
  t.is(outcome.how, 'cancelled');
  const errors = s.errors();
  t.is(errors.length, 1);
  t.like(errors[0], { fatal: true, code: 'sts_auth_failed' });
  t.regex(errors[0]!.message, /Incorrect API key/);
  t.false(JSON.stringify(s.all().map((f) => ({ ...f, cause: undefined }))).includes(key));
  t.false(errors[0]!.message.includes(key));
});

test.serial('an unknown model (sts_config_id) ends the session with sts_config_not_found', async (t) => {
  const fake = await withFake(t);
  const s = await session(t, fake, agentRecord({ sts_config_id: 'no-such-model' }));
  await s.outcome;
  t.like(s.errors()[0], { fatal: true, code: 'sts_config_not_found' });
  t.regex(s.errors()[0]!.message, /no-such-model/);
});

test.serial('a connection dropped mid-turn: the turn ends with what was received, the processor reconnects and replays the transcript, and the next turn works', async (t) => {
  const fake = await withFake(t, { replies: ['first answer that will be cut short by a drop', 'second answer'], userTranscripts: ['first question', 'second question'], dropAfterDeltas: 3 });
  const s = await session(t, fake, agentRecord(), { reconnectAttempts: 2 });
  await connected(fake);
  s.say(userUtterance(300, 600));
  await until(() => s.errors().some((e) => e.code === 'sts_reconnected'), { timeoutMs: 5_000, what: 'the sts_reconnected error frame' });
  await connected(fake, 2);
  t.like(s.errors().find((e) => e.code === 'sts_reconnected'), { fatal: false });
  await botDone(s);
  // The history follows the client's reading of session.updated: wait for its first item.
  const replayed = () => fake.connections[1]!.events.filter((e) => e.type === 'conversation.item.create').map((e) => [e.item.role, e.item.content[0].text]);
  await until(() => replayed().length >= 1, { timeoutMs: 5_000, what: 'the transcript replayed on the new connection' });
  t.deepEqual(replayed()[0], ['user', 'first question']);
  // The cut answer is in the history only if it had finished playing before the reconnect.
  const [, answer, ...more] = replayed();
  if (answer) t.true(answer[0] === 'assistant' && 'first answer that will be cut short by a drop'.startsWith(answer[1]));
  t.deepEqual(more, []);
  fake.setFaults({ dropAfterDeltas: undefined });
  s.say(userUtterance(300, 600));
  await until(() => s.all().filter((f) => f.type === 'tts-stopped').length >= 2, { timeoutMs: 8_000, what: 'two tts-stopped frames' });
  t.is(fake.connections.length, 2);
  await s.worker.end();
});

test.serial('after a drop between turns, the new connection gets the whole exchange: the user turn and the answer as played', async (t) => {
  const fake = await withFake(t, { replies: [REPLY], userTranscripts: ['what is the weather'] });
  const s = await session(t, fake, agentRecord(), { reconnectAttempts: 2 });
  await connected(fake);
  s.say(userUtterance(300, 600));
  await botDone(s);
  fake.dropAll();
  await connected(fake, 2);
  // The history goes out once the client has read session.updated, after the fake sent it: wait
  // for it to arrive (it was read at once, and came up empty on a loaded machine).
  const replay = () => fake.connections[1]!.events.filter((e) => e.type === 'conversation.item.create').map((e) => [e.item.role, e.item.content[0].type, e.item.content[0].text]);
  await until(() => replay().length >= 2, { timeoutMs: 5_000, what: () => `the exchange replayed on the new connection; so far ${JSON.stringify(replay())}` });
  t.deepEqual(replay(), [['user', 'input_text', 'what is the weather'], ['assistant', 'output_text', REPLY]]);
  await s.worker.end();
});

test.serial('a connection that cannot come back ends the session with sts_connection_lost', async (t) => {
  const fake = await withFake(t);
  const s = await session(t, fake, agentRecord(), { reconnectAttempts: 2 });
  await connected(fake);
  await fake.close();
  const outcome: any = await s.outcome;
  t.is(outcome.how, 'cancelled');
  const fatal = s.errors().find((e) => e.fatal);
  t.like(fatal, { code: 'sts_connection_lost' });
  t.regex(fatal!.message, /2 reconnect attempts failed/);
});

test.serial('a malformed provider message is skipped: the turn plays on', async (t) => {
  const fake = await withFake(t, { replies: [REPLY], malformedAt: 2 });
  const s = await session(t, fake);
  await connected(fake);
  s.say(userUtterance(300, 600));
  await botDone(s);
  const frames = speechFrames(s).filter((f) => f.type === 'speech' || f.type === 'speech-start');
  t.true(frames.length * 640 >= to16k(fakeBotVoice(REPLY, 24_000), 24_000).length - 640);
  t.deepEqual(s.errors().filter((e) => e.fatal), []);
  await s.worker.end();
});

test.serial('unexpected and malformed messages of every shape never end the session', async (t) => {
  const fake = await withFake(t, { replies: [REPLY] });
  const s = await session(t, fake);
  await connected(fake);
  for (const raw of [
  'null', '42', '"text"', '[]', '{}', '{"type":5}', '{"type":"response.output_audio.delta"}',
  '{"type":"response.output_audio.delta","response_id":"nope","delta":"AAAA"}',
  '{"type":"response.output_audio.delta","response_id":null,"delta":12}',
  '{"type":"response.created","response":null}', '{"type":"response.created"}',
  '{"type":"response.done","response":{"id":"x","usage":{"input_tokens":"many"}}}',
  '{"type":"error"}', '{"type":"error","error":null}',
  '{"type":"conversation.item.input_audio_transcription.completed","transcript":{"a":1}}',
  '{"type":"input_audio_buffer.speech_started"}', '{"type":"unknown.event","x":[1,2]}',
  '{"type":"response.output_item.added","item":null}', '\u0000\u0001binaryish', '{"type":"session.updated"',
]) fake.injectRaw(raw);
  s.say(userUtterance(300, 600));
  await botDone(s);
  t.is(heardText(s), REPLY);
  t.deepEqual(s.errors().filter((e) => e.fatal), []);
  t.is(fake.connections.length, 1, 'no reconnect was needed');
  await s.worker.end();
});

test.serial('beta event names (response.audio.delta, response.audio_transcript.delta) are accepted', async (t) => {
  const fake = await withFake(t, { beta: true, replies: ['beta voice here'] });
  const s = await session(t, fake);
  await connected(fake);
  s.say(userUtterance(300, 600));
  await botDone(s);
  t.true(fake.connections[0]!.sent.includes('response.audio.delta'));
  t.is(heardText(s), 'beta voice here');
  await s.worker.end();
});

test.serial('tools saved on a third_party agent are never offered nor dispatched', async (t) => {
  const fake = await withFake(t);
  const tools = [{ tool_id: 't1', enabled: true, type: 'function' as const, function: { name: 'lookup', description: 'd', parameters: { properties: {} } }, delivery: { mode: 'client' as const } }];
  const s = await session(t, fake, agentRecord({ tools: tools as any }));
  await connected(fake);
  t.deepEqual(s.built.toolset.definitions, []);
  t.is(s.built.toolset.mode, 'third_party');
  const update = fake.connections[0]!.events.find((e) => e.type === 'session.update')!;
  t.false('tools' in update.session);
  t.true(s.logger.lines.some((l) => /not dispatched/.test(l.message)));
  t.false(s.all().some((f) => f.type === 'tool-calls' || f.type === 'tool-call-in-progress'));
  await s.worker.end();
});

test.serial('the session limit ends the session (max_duration) and closes the provider connection', async (t) => {
  const fake = await withFake(t);
  const s = await session(t, fake, agentRecord({ session_limit_seconds: 1 }));
  const outcome: any = await s.outcome;
  t.like(outcome, { how: 'ended', reason: 'max_duration' });
  await until(() => fake.connections.length === 1 && fake.connections[0]!.sent.includes('session.updated'), { timeoutMs: 10_000, what: 'the provider connection set up (session.updated)' });
  // The provider socket is closed by us once the session ended.
  await until(() => (process as any).getActiveResourcesInfo().filter((r: string) => r === 'TLSWrap').length === 0, { timeoutMs: 3_000, what: 'the provider socket to close' });
});

test.serial('verify answers valid for a good key, and invalid for a refused key or an unknown model', async (t) => {
  const fake = await withFake(t);
  const plugin = createOpenAIRealtimePlugin({ baseURL: fake.baseURL, verifyTimeoutMs: 2_000 });
  const { Registry } = await import('../../core/index.ts');
  const registry = new Registry().use(plugin);
  const verify = (registry.info('sts', 'openai-realtime').descriptor as any).verify;
  t.deepEqual(await verify({ apiKey: fake.apiKey, configId: 'gpt-realtime', providerConfig: {} }), { valid: true });
  const bad = await verify({ apiKey: 'sk-bad-000000', configId: null, providerConfig: {} });
  t.false(bad.valid);
  t.regex(bad.error, /authentication failed/);
  const model = await verify({ apiKey: fake.apiKey, configId: 'nope', providerConfig: {} });
  t.false(model.valid);
  t.regex(model.error, /nope/);
});
