/**
 * /realtime on the real server (PostgreSQL, API keys, model configs, the real face plugin):
 * config selection, key placement, and every documented limit on both sides of its bound.
 */
import test from 'ava';
import { attachRealtime, createRealtimeResolver, type RealtimeEndpoint } from '../../server/realtime/index.ts';
import { TEMPLATE_ORGANIZATION } from '../../server/services/organizations.ts';
import { REALTIME_LIMITS, encodeAudioIn } from '../../protocol/realtime.ts';
import { holdsWithin, until } from '../../testing/until.ts';
import type { TestServer } from '../server/harness.ts';
import { startRealtimeServer, type RealtimeServer } from '../support/realtime-server.ts';
import { connectRaw, isError, isReady, tone, type Conn } from './ws-conn.ts';

let ts: TestServer;
let configId: string;

let fixture: RealtimeServer | undefined;
test.before(async () => {
  // Its tests run concurrently, each with sessions of its own: a count limit above the machine default (cores x 2).
  fixture = await startRealtimeServer({ label: 'realtime_limits', canvas: { width: 192, height: 128 }, endpoint: { maxSessions: 32 } });
  ({ ts, configId } = fixture);
});

test.after.always(async () => {
  await fixture?.stop();
});

const open = (query = `config_id=${configId}`, headers: Record<string, string> = { 'x-api-key': ts.keyA }): Conn =>
  connectRaw(`${ts.url.replace(/^http/, 'ws')}/realtime?${query}`, headers);

async function ready(t: { teardown(fn: () => void): void }, query?: string): Promise<Conn> {
  const c = open(query);
  t.teardown(() => c.ws.close());
  await c.next(isReady);
  return c;
}

/** A ping padded to exactly `bytes` bytes of UTF-8 JSON. */
function pingOfSize(bytes: number, t = 1): string {
  const head = `{"type":"ping","t":${t},"pad":"`;
  return head + 'x'.repeat(bytes - head.length - 2) + '"}';
}

test('a template config is selected by its uuid; both template aliases open their model', async (t) => {
  const template = await ts.server.db('model_configs').where({ organization_id: TEMPLATE_ORGANIZATION.organization_id, model_id: 'svc/human-portrait' }).first('model_config_id');
  t.truthy(template, 'the template organization has a human-portrait config');
  const byId = await ready(t, `config_id=${template.model_config_id}`);
  t.like(byId.messages.find(isReady), { config_id: template.model_config_id, model_variant_id: 'svc/human-portrait/v1' });
  const portrait = await ready(t, 'config_id=svc/human-portrait');
  const p = portrait.messages.find(isReady);
  t.like(p, { model_variant_id: 'svc/human-portrait/v1', fps: 25 });
  t.true(p!.type === 'session_ready' && p!.width <= 1280 && p!.height <= 720, 'human-portrait stays within 720p');
  const presence = await ready(t, 'config_id=svc/human-presence');
  t.like(presence.messages.find(isReady), { model_variant_id: 'svc/human-presence/v1' });
});

test('the key is accepted as Authorization: Bearer; in the URL it is refused under every name', async (t) => {
  const bearer = open(`config_id=${configId}`, { authorization: `Bearer ${ts.keyA}` });
  t.teardown(() => bearer.ws.close());
  await bearer.next(isReady);
  for (const name of ['api_key', 'apikey', 'key', 'token']) {
    const c = open(`config_id=${configId}&${name}=${ts.keyA}`, { 'x-api-key': ts.keyA });
    await c.next(isError('auth_failed'));
    t.is((await c.closed).code, 4401, name);
  }
});

test('a stored configuration the variant schema refuses is invalid_configuration (4422)', async (t) => {
  const created = await ts.call('POST', '/v1/model-configs', { body: { title: 'to corrupt', model_variant_id: 'svc/human-portrait/v1', model_configurations: {} } });
  await ts.server.db('model_configs').where('model_config_id', created.body.model_config_id).update({ model_configurations: JSON.stringify({ width: 5000 }) });
  const c = open(`config_id=${created.body.model_config_id}`);
  t.like(await c.next(isError('invalid_configuration')), { fatal: true });
  t.is((await c.closed).code, 4422);
});

test('message size: a 64 KiB text message is served, one byte more is frame_too_large, the session carries on', async (t) => {
  const c = await ready(t);
  c.ws.send(pingOfSize(REALTIME_LIMITS.maxMessageBytes, 1));
  t.like(await c.next((m) => m.type === 'pong'), { t: 1 });
  c.ws.send(pingOfSize(REALTIME_LIMITS.maxMessageBytes + 1, 2));
  t.like(await c.next(isError('frame_too_large')), { fatal: false });
  c.ws.send(JSON.stringify({ type: 'ping', t: 3 }));
  await c.next((m) => m.type === 'pong' && m.t === 3);
  t.falsy(c.messages.find((m) => m.type === 'pong' && m.t === 2), 'the oversized message was dropped');
});

test('hard limit: 1 MiB is still a typed error, 1 MiB + 1 closes only that socket (1009); the server and a bystander carry on', async (t) => {
  const bystander = await ready(t);
  const c = await ready(t);
  c.ws.send(Buffer.alloc(1024 * 1024, 1));
  t.like(await c.next(isError('frame_too_large')), { fatal: false });
  c.ws.send(Buffer.alloc(1024 * 1024 + 1, 1));
  t.is((await c.closed).code, 1009);
  const seen = bystander.frames.length;
  await bystander.framesUntil((f) => f.index >= (bystander.frames[seen - 1]?.index ?? 0) + 5);
  const fresh = await ready(t);
  t.truthy(fresh.messages.find(isReady), 'new sessions still open');
});

test('audio chunk: exactly 1 s is accepted, one sample more is frame_too_large', async (t) => {
  const c = await ready(t);
  c.ws.send(encodeAudioIn(tone(1000), 0));
  c.ws.send(encodeAudioIn(new Int16Array(16_001).fill(5), 1));
  await c.next(isError('frame_too_large'));
  await c.framesUntil((f) => f.type === 'speech-start');
  c.ws.send(JSON.stringify({ type: 'ping', t: 9 }));
  await c.next((m) => m.type === 'pong');
  t.is(c.messages.filter((m) => m.type === 'error').length, 1, 'only the 16,001-sample chunk was refused');
});

test('queued audio: 60 s ahead of playback is accepted, more is rate_limited, and a cancel makes room again', async (t) => {
  const c = await ready(t);
  const second = tone(1000);
  for (let i = 0; i < 60; i++) c.ws.send(encodeAudioIn(second, i));
  c.ws.send(JSON.stringify({ type: 'ping', t: 60 }));
  await c.next((m) => m.type === 'pong' && m.t === 60);
  t.is(c.messages.filter((m) => m.type === 'error').length, 0, '60 s are within the limit');
  c.ws.send(encodeAudioIn(second, 60));
  t.like(await c.next(isError('rate_limited')), { fatal: false });
  c.ws.send(JSON.stringify({ type: 'cancel' }));
  await c.next((m) => m.type === 'turn_cancelled');
  c.ws.send(encodeAudioIn(second, 61));
  c.ws.send(JSON.stringify({ type: 'ping', t: 61 }));
  await c.next((m) => m.type === 'pong' && m.t === 61);
  t.is(c.messages.filter(isError('rate_limited')).length, 1);
});

test('control messages: 50 in a burst are served, the 51st is rate_limited', async (t) => {
  const c = await ready(t);
  for (let i = 1; i <= REALTIME_LIMITS.maxControlMessagesPerSecond + 1; i++) c.ws.send(JSON.stringify({ type: 'ping', t: i }));
  await c.next(isError('rate_limited'));
  await c.next((m) => m.type === 'pong' && m.t === 50);
  t.is(c.messages.filter((m) => m.type === 'pong').length, 50);
  t.falsy(c.messages.find((m) => m.type === 'pong' && m.t === 51));
});

test('turn ids: frames carry the id turn_started announced, also after an implicit turn', async (t) => {
  const c = await ready(t);
  c.ws.send(encodeAudioIn(tone(200), 0, true)); // no start_turn: turn 1 opens implicitly
  await c.framesUntil((f) => f.final);
  c.ws.send(JSON.stringify({ type: 'start_turn' }));
  const started = await c.next((m) => m.type === 'turn_started');
  c.ws.send(encodeAudioIn(tone(200), 1, true));
  const firstOfSecond = await c.framesUntil((f) => f.type === 'speech-start' && f.turnId !== 1);
  t.like(started, { turn_id: 2 });
  t.is(firstOfSecond.turnId, 2);
  t.deepEqual([...new Set(c.frames.filter((f) => f.turnId !== null).map((f) => f.turnId))], [1, 2]);
});

test('sessions per process: the limit is served, one more is server_busy (4503), and a closed session frees its slot', async (t) => {
  const small = mountRealtimeSmall();
  t.teardown(() => small.endpoint.close());
  const sessions = [small.open(), small.open()];
  t.teardown(() => sessions.forEach((c) => c.ws.close()));
  for (const c of sessions) await c.next(isReady);
  const extra = small.open();
  await extra.next(isError('server_busy'));
  t.is((await extra.closed).code, 4503);
  sessions[0]!.ws.close();
  await holdsWithin(() => small.endpoint.activeSessions <= 1, { timeoutMs: 2_000, intervalMs: 20 });
  const again = small.open();
  t.teardown(() => again.ws.close());
  t.like(await again.next((m) => m.type === 'session_ready' || m.type === 'error'), { type: 'session_ready' });
});

test('a client that stops reading is ended slow_consumer once its socket holds the hard bound, its session and slot freed; a bystander carries on; a flood of bad messages is answered a few times a second', async (t) => {
  t.timeout(180_000); // up to 24 s in loaded CI runs (longer beside other work); bounded well above that, and above the 120 s a test may otherwise go without a result
  const path = '/realtime-slow';
  const endpoint = attachRealtime(ts.server.httpServer, { registry: ts.server.registry, resolver: createRealtimeResolver(ts.server), maxSessions: 4, path, hardMaxBufferedBytes: 256 * 1024 });
  t.teardown(() => endpoint.close());
  const url = `${ts.url.replace(/^http/, 'ws')}${path}?config_id=${configId}`;
  const bystander = connectRaw(url, { 'x-api-key': ts.keyA });
  const stalled = connectRaw(url, { 'x-api-key': ts.keyA });
  t.teardown(() => {
    bystander.ws.close();
    stalled.ws.terminate();
  });
  await bystander.next(isReady);
  await stalled.next(isReady);
  // Flooded with undecodable binary messages while reading: each is refused, but only a few answers a second.
  for (let i = 0; i < 500; i++) stalled.ws.send(Buffer.from([1]));
  await stalled.next((m) => m.type === 'error' && m.code === 'malformed_message');
  const answered = await new Promise<number>((resolve) => setTimeout(() => resolve(stalled.messages.filter((m) => m.type === 'error').length), 300));
  t.true(answered >= 1 && answered <= 20, `${answered} answers to 500 bad messages`);
  // It stops reading: the server's frames (and its answers to pings) pile up in the socket.
  (stalled.ws as unknown as { _socket: { pause(): void } })._socket.pause();
  const keepAlive = setInterval(() => stalled.ws.readyState === stalled.ws.OPEN && stalled.ws.send(JSON.stringify({ type: 'ping' })), 200);
  t.teardown(() => clearInterval(keepAlive));
  await until(async () => endpoint.activeSessions === 1, { timeoutMs: 60_000, intervalMs: 50, what: 'the stalled session to be ended' });
  clearInterval(keepAlive);
  t.is(endpoint.activeSessions, 1, 'the stalled session was ended and its slot freed');
  const before = bystander.frames.length;
  await bystander.framesUntil(() => bystander.frames.length > before + 5);
  t.is(bystander.ws.readyState, bystander.ws.OPEN, 'the bystander carries on');
});

/** A second endpoint on the same HTTP server, at its own path, with a session limit of 2. */
function mountRealtimeSmall() {
  const path = '/realtime-small';
  const endpointSmall = attachSmall(path);
  return {
    endpoint: endpointSmall,
    open: () => connectRaw(`${ts.url.replace(/^http/, 'ws')}${path}?config_id=${configId}`, { 'x-api-key': ts.keyA }),
  };
}

function attachSmall(path: string): RealtimeEndpoint {
  return attachRealtime(ts.server.httpServer, { registry: ts.server.registry, resolver: createRealtimeResolver(ts.server), maxSessions: 2, path });
}
