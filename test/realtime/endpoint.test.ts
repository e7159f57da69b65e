/**
 * The /realtime endpoint on the real REST server (PostgreSQL, API keys, model configs) with the
 * real face plugin, through real WebSocket connections.
 */
import test from 'ava';
import type { RealtimeEndpoint } from '../../server/realtime/index.ts';
import { encodeAudioIn } from '../../protocol/realtime.ts';
import { until } from '../../testing/until.ts';
import type { TestServer } from '../server/harness.ts';
import { startRealtimeServer, type RealtimeServer } from '../support/realtime-server.ts';
import { connectRaw, isError, tone, type Conn } from './ws-conn.ts';

let ts: TestServer;
let endpoint: RealtimeEndpoint;
let wsBase: string;
let smallConfigId: string;

let fixture: RealtimeServer | undefined;
test.before(async () => {
  fixture = await startRealtimeServer({ label: 'realtime', canvas: { width: 320, height: 240 }, endpoint: { maxSessions: 4 } });
  ({ ts, endpoint, url: wsBase, configId: smallConfigId } = fixture);
});

test.after.always(async () => {
  await fixture?.stop();
});

const connect = (query: string, headers: Record<string, string> = { 'x-api-key': ts.keyA }): Conn => connectRaw(`${wsBase}?${query}`, headers);

test.serial('a missing API key is refused with auth_failed and close code 4401', async (t) => {
  const c = connect(`config_id=${smallConfigId}`, {});
  const err = await c.next(isError('auth_failed'));
  t.like(err, { fatal: true });
  t.is((await c.closed).code, 4401);
});

test.serial('an API key in the URL is refused, even a valid one', async (t) => {
  const c = connect(`config_id=${smallConfigId}&api_key=${ts.keyA}`, {});
  t.regex((await c.next(isError('auth_failed'))).type === 'error' ? (c.messages[0] as { message: string }).message : '', /never accepted in the URL/);
  t.is((await c.closed).code, 4401);
});

test.serial('an invalid key is refused', async (t) => {
  const c = connect(`config_id=${smallConfigId}`, { 'x-api-key': 'svc_nope' });
  await c.next(isError('auth_failed'));
  t.is((await c.closed).code, 4401);
});

test.serial('an unknown config and another organization\'s config are both unknown_config (4404)', async (t) => {
  const unknown = connect('config_id=00000000-0000-4000-8000-000000000000');
  await unknown.next(isError('unknown_config'));
  t.is((await unknown.closed).code, 4404);
  const other = connect(`config_id=${smallConfigId}`, { 'x-api-key': ts.keyB });
  await other.next(isError('unknown_config'));
  t.is((await other.closed).code, 4404);
});

test.serial('the template alias opens a session; frames come at 25 fps with 40 ms of audio each', async (t) => {
  const c = connect('config_id=svc/human-portrait');
  const ready = await c.next((m) => m.type === 'session_ready');
  t.like(ready, { type: 'session_ready', fps: 25, model_variant_id: 'svc/human-portrait/v1' });
  await c.framesUntil((f) => f.index >= 10);
  const first = c.frames.slice(0, 10);
  t.deepEqual(first.map((f) => f.index), [...Array(10).keys()]);
  t.true(first.every((f) => f.ptsMs === f.index * 40 && f.audio.length === 640 && f.type === 'idle' && f.image !== undefined));
  t.true(first.every((f) => f.image![0] === 0xff && f.image![1] === 0xd8), 'JPEG images');
  c.ws.close();
});

test.serial('speech sent in a turn comes back as speech frames carrying exactly that audio', async (t) => {
  const c = connect(`config_id=${smallConfigId}`);
  await c.next((m) => m.type === 'session_ready');
  const speech = tone(600);
  c.ws.send(JSON.stringify({ type: 'start_turn' }));
  c.ws.send(encodeAudioIn(speech, 0, true));
  await c.framesUntil((f) => f.final, 10_000);
  const spoken = c.frames.filter((f) => f.type === 'speech' || f.type === 'speech-start');
  t.is(spoken[0]!.type, 'speech-start');
  const audio = new Int16Array(spoken.length * 640);
  spoken.forEach((f, i) => audio.set(f.audio, i * 640));
  t.deepEqual(Array.from(audio.subarray(0, speech.length)), Array.from(speech));
  t.truthy(c.frames.find((f) => f.type === 'fade-out'));
  c.ws.close();
});

test.serial('cancel drops queued speech and fades to idle within 200 ms', async (t) => {
  const c = connect(`config_id=${smallConfigId}`);
  await c.next((m) => m.type === 'session_ready');
  c.ws.send(JSON.stringify({ type: 'start_turn' }));
  for (let i = 0; i < 5; i++) c.ws.send(encodeAudioIn(tone(1000), i, i === 4));
  const speaking = await c.framesUntil((f) => f.type === 'speech' && f.index > 0);
  c.ws.send(JSON.stringify({ type: 'cancel' }));
  const cancelled = await c.next((m) => m.type === 'turn_cancelled');
  t.like(cancelled, { had_speech: true });
  await c.framesUntil((f) => f.type === 'idle' && f.index > speaking.index, 5000);
  const after = c.frames.filter((f) => f.index > speaking.index);
  const lastSpeech = Math.max(...after.filter((f) => f.type === 'speech').map((f) => f.index), speaking.index);
  const firstIdle = after.find((f) => f.type === 'idle')!.index;
  t.true((firstIdle - speaking.index) * 40 <= 200 + 80, `idle ${(firstIdle - speaking.index) * 40} ms after the cancel was sent`);
  t.true(lastSpeech < firstIdle);
  t.true(after.filter((f) => f.type === 'speech').length < 4, 'the 5 s of queued speech were dropped');
  c.ws.close();
});

test.serial('bad input gets typed errors and the session carries on; other sessions are unaffected', async (t) => {
  const bystander = connect(`config_id=${smallConfigId}`);
  const c = connect(`config_id=${smallConfigId}`);
  t.teardown(() => {
    c.ws.close();
    bystander.ws.close();
  });
  await c.next((m) => m.type === 'session_ready');
  await bystander.next((m) => m.type === 'session_ready');
  c.ws.send('not json');
  c.ws.send(JSON.stringify({ type: 'explode' }));
  c.ws.send(Buffer.from([0x07, 1, 0, 0, 0, 0, 0, 0]));
  c.ws.send(Buffer.from([1, 1, 0, 0, 0, 0, 0, 0, 1])); // odd byte count
  c.ws.send(Buffer.alloc(70_000, 1));
  await c.next(isError('frame_too_large'));
  t.is(c.messages.filter(isError('malformed_message')).length, 4);
  t.true(c.messages.filter((m) => m.type === 'error').every((m) => m.type === 'error' && !m.fatal));
  c.ws.send(JSON.stringify({ type: 'ping', t: 7 }));
  t.like(await c.next((m) => m.type === 'pong'), { t: 7 });
  const before = bystander.frames.length;
  await bystander.framesUntil((f) => f.index > before + 5);
  t.true(bystander.frames.length > before + 5, 'the other session kept streaming');
});

test.serial('beyond the session limit the server answers server_busy (4503)', async (t) => {
  await until(() => endpoint.activeSessions === 0, { timeoutMs: 2_000, intervalMs: 20, what: () => `the earlier sessions to close (${endpoint.activeSessions} still open)` });
  t.is(endpoint.activeSessions, 0, 'earlier sessions have closed');
  const open = [connect(`config_id=${smallConfigId}`), connect(`config_id=${smallConfigId}`), connect(`config_id=${smallConfigId}`), connect(`config_id=${smallConfigId}`)];
  t.teardown(() => open.forEach((c) => c.ws.close()));
  const answers = await Promise.all(open.map((c) => c.next((m) => m.type === 'session_ready' || m.type === 'error')));
  t.deepEqual(answers.map((m) => m.type), ['session_ready', 'session_ready', 'session_ready', 'session_ready'], 'the first four are served');
  const extra = connect(`config_id=${smallConfigId}`);
  const answer = await extra.next((m) => m.type === 'session_ready' || m.type === 'error');
  const busy = answer.type === 'error' && answer.code === 'server_busy';
  t.is((await extra.closed).code, 4503);
  for (const c of open) c.ws.close();
  extra.ws.close();
  t.true(busy, 'the fifth session is refused');
});
