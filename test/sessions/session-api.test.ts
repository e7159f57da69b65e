/**
 * The Session API over HTTP on a real server with the real bot runner (offline engines, the
 * human-portrait face, embedded rooms): every error code with its status and body, the allowlist
 * through real Origin headers, auth_enabled connect tokens, admission limits, release (beacon
 * forms, idempotence), CORS, and the call record of each admitted session.
 */
import test from 'ava';
import http from 'node:http';
import { until } from '../../testing/until.ts';
import { mintConnectToken } from '../../server/sessions/connect-auth.ts';
import { SESSION_API_LIMITS } from '../../server/sessions/session-routes.ts';
import { roomOf, startSessionServer, type SessionTestServer } from './session-harness.ts';

let s: SessionTestServer;
test.before(async () => {
  s = await startSessionServer('session_api', { rooms: { maxRooms: 6 } });
});
test.after.always(async () => {
  await s?.stop();
});

const UNKNOWN = '3f1e8a52-0c4d-4e7b-9a1f-6b2c8d4e0f13';
const isSessionError = (body: any, code: string) =>
  body && body.error_code === code && typeof body.message === 'string' && Object.keys(body).every((k) => ['error_code', 'message', 'retry_after_seconds'].includes(k));

test.serial('a published agent admits a session: session_id, an embedded room_url on this host, a token; one active call', async (t) => {
  const agentId = await s.agent();
  const res = await s.connect({ agent_id: agentId, client_user_ref: 'visitor-1' }, { origin: 'https://shop.example.com' });
  t.is(res.status, 200, res.text);
  t.deepEqual(Object.keys(res.body).sort(), ['room_url', 'session_id', 'token']);
  t.regex(res.body.session_id, /^[0-9a-f-]{36}$/);
  const url = new URL(res.body.room_url);
  t.is(url.protocol, 'ws:');
  t.is(url.host, new URL(s.url).host);
  t.is(url.pathname, '/v1/rooms/signal');
  t.regex(roomOf(res.body.room_url), /^s_[A-Za-z0-9_-]{32}$/, 'room names carry 192 random bits');
  t.false(res.body.room_url.includes(res.body.token), 'the token is not in the URL');
  t.is(res.headers.get('cache-control'), 'private, no-store');
  t.is(res.headers.get('access-control-allow-origin'), '*');
  const call = await s.callOf(agentId, res.body.session_id);
  t.like(call, { status: 'active', client_user_ref: 'visitor-1', ended_at: null });
  t.is(call.applied_session_limit_seconds, (await s.call('GET', `/v1/agents/${agentId}`)).body.session_limit_seconds);
  t.like(call.metadata, { origin: 'https://shop.example.com', room_provider: 'embedded' });

  // Deleting the agent is refused while the session lives.
  const del = await s.call('DELETE', `/v1/agents/${agentId}`);
  t.is(del.status, 409);
  t.is(del.body.code, 'agent_has_active_sessions');

  const released = await s.release(roomOf(res.body.room_url));
  t.deepEqual(released.body, { released: 1 });
  const ended = await until(async () => {
    const c = await s.callOf(agentId, res.body.session_id);
    return c.status !== 'active' && c;
  }, { timeoutMs: 10_000, intervalMs: 50, what: 'the call to end' });
  t.like(ended, { status: 'completed', termination_reason: 'client_released', failure_reason: null });
  t.truthy(ended.ended_at);
  t.is(s.live.sessions.size, 0);
  t.is(s.rooms.rooms.get(roomOf(res.body.room_url)), undefined, 'the room is closed');
  t.is((await s.call('DELETE', `/v1/agents/${agentId}`)).status, 204);
});

test.serial('a client that hangs up while its session starts (a page closed mid-connect) gets it released as soon as it is granted, not at the join timeout', async (t) => {
  const agentId = await s.agent();
  const body = JSON.stringify({ agent_id: agentId });
  const url = new URL(`${s.url}/v1/public/agents/connect`);
  const socket = await new Promise<import('node:net').Socket>((resolve, reject) => {
    const req = http.request({ host: url.hostname, port: url.port, method: 'POST', path: url.pathname, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } });
    req.on('error', () => undefined);
    req.on('socket', (sock) => resolve(sock));
    req.on('response', () => reject(new Error('answered before the client hung up')));
    req.end(body);
  });
  // Admitted (its call exists): the page goes away while the room and the bot start.
  const calls = async () => (await s.call('GET', `/v1/agents/${agentId}/calls`)).body.data as any[];
  await until(async () => (await calls()).length === 1, { timeoutMs: 30_000, intervalMs: 10, what: 'the session to be admitted' });
  socket.destroy();
  const ended = await until(async () => {
    const [call] = await calls();
    return call && call.status !== 'active' ? call : undefined;
  }, { timeoutMs: 30_000, intervalMs: 50, what: 'the abandoned session to end (the join timeout is 60 s)' });
  t.like(ended, { termination_reason: 'client_released' });
  await until(async () => s.live.sessions.size === 0, { timeoutMs: 10_000, intervalMs: 20, what: 'the session to leave this process' });
});

test.serial('release is idempotent, accepts beacon forms, and never errors for unknown rooms', async (t) => {
  const agentId = await s.agent();
  const a = await s.connect({ agent_id: agentId });
  const b = await s.connect({ agent_id: agentId });
  t.is(a.status, 200);
  t.is(b.status, 200);
  // sendBeacon(url, string) posts text/plain; fetch keepalive may post nothing.
  t.deepEqual((await s.release(roomOf(a.body.room_url), { body: 'bye', headers: { 'content-type': 'text/plain;charset=UTF-8' } })).body, { released: 1 });
  t.deepEqual((await s.release(roomOf(a.body.room_url), { body: 'bye', headers: { 'content-type': 'text/plain;charset=UTF-8' } })).body, { released: 0 });
  t.deepEqual((await s.release(roomOf(b.body.room_url))).body, { released: 1 });
  t.deepEqual((await s.release(roomOf(b.body.room_url))).body, { released: 0 });
  for (const room of ['s_unknownroom', 'nope', 'x'.repeat(300), '..%2F..', '%00']) {
    const res = await s.release(room);
    t.is(res.status, 200, room);
    t.deepEqual(res.body, { released: 0 });
  }
  const big = await s.release('s_whatever', { body: 'x'.repeat(SESSION_API_LIMITS.maxReleaseBodyBytes + 1), headers: { 'content-type': 'text/plain' } });
  t.is(big.status, 413);
  t.true(isSessionError(big.body, 'payload_too_large'));
  t.is(big.headers.get('connection'), 'close', 'answered unread, the connection closed');
  // Exactly at the cap is accepted (the limit's other side).
  const atCap = await s.release('s_whatever', { body: 'x'.repeat(SESSION_API_LIMITS.maxReleaseBodyBytes), headers: { 'content-type': 'text/plain' } });
  t.is(atCap.status, 200, atCap.text);
  t.deepEqual(atCap.body, { released: 0 });
});

test.serial('a connect body of exactly the cap is read (and judged on its fields); one byte more is refused unread', async (t) => {
  const agentId = await s.agent();
  const base = JSON.stringify({ agent_id: agentId, pad: '' });
  const body = JSON.stringify({ agent_id: agentId, pad: 'x'.repeat(SESSION_API_LIMITS.maxConnectBodyBytes - base.length) });
  t.is(Buffer.byteLength(body), SESSION_API_LIMITS.maxConnectBodyBytes);
  const ok = await s.connect(body, { 'content-type': 'application/json' });
  t.is(ok.status, 200, ok.text);
  await s.release(roomOf(ok.body.room_url));
  const over = await s.connect(body.replace('"pad":"', '"pad":"x'), { 'content-type': 'application/json' });
  t.is(over.status, 413);
  t.true(isSessionError(over.body, 'payload_too_large'));
  t.regex(over.body.message, /exceeds 16384 bytes/);
  t.is(over.headers.get('connection'), 'close');
  await until(async () => s.live.sessions.size === 0, { timeoutMs: 10_000, intervalMs: 50, what: 'no live session left' });
});

test.serial('internal_error (500) in the Session API shape for an unexpected failure (a corrupt agent row), with no detail leaked; nothing admitted', async (t) => {
  const agentId = await s.agent();
  // allowed_hostnames is a JSON array by every write path of the API; an object here is data no
  // code path expects (a hand-edited or corrupted row).
  await s.server.db('agents').where('agent_id', agentId).update({ allowed_hostnames: JSON.stringify({ corrupt: true }) });
  const res = await s.connect({ agent_id: agentId });
  t.is(res.status, 500, res.text);
  t.true(isSessionError(res.body, 'internal_error'));
  t.is(res.body.message, 'internal server error');
  t.notRegex(res.text, /TypeError|map|corrupt|stack/i);
  t.is(s.live.sessions.size, 0);
  const calls = (await s.call('GET', `/v1/agents/${agentId}/calls`)).body.data as any[];
  t.is(calls.length, 0, 'refused before admission: no call record');
});

test.serial('CORS: the connect preflight is answered for any origin with the JSON content type allowed', async (t) => {
  const res = await fetch(`${s.url}/v1/public/agents/connect`, {
    method: 'OPTIONS',
    headers: { origin: 'https://shop.example.com', 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' },
  });
  t.is(res.status, 204);
  t.is(res.headers.get('access-control-allow-origin'), '*');
  t.regex(res.headers.get('access-control-allow-methods') ?? '', /POST/);
  t.regex(res.headers.get('access-control-allow-headers') ?? '', /content-type/i);
});

test.serial('agent_not_found (404) for unknown and non-UUID ids; agent_unpublished (403)', async (t) => {
  for (const id of [UNKNOWN, 'not-a-uuid', '', 'x'.repeat(1000), "'; drop table agents; --"]) {
    const res = await s.connect({ agent_id: id });
    t.is(res.status, 404, id);
    t.true(isSessionError(res.body, 'agent_not_found'), res.text);
  }
  const hidden = await s.agent({}, { publish: false });
  const res = await s.connect({ agent_id: hidden });
  t.is(res.status, 403);
  t.true(isSessionError(res.body, 'agent_unpublished'));
});

test.serial('bad bodies are 400 invalid_request in the Session API shape; a non-JSON content type is 415; a body over the cap 413', async (t) => {
  const agentId = await s.agent();
  const cases: Array<[string, unknown]> = [
    ['malformed JSON', '{"agent_id": '],
    ['an array', [agentId]],
    ['null', 'null'],
    ['a string', '"hello"'],
    ['no agent_id', {}],
    ['agent_id a number', { agent_id: 42 }],
    ['client_user_ref a number', { agent_id: agentId, client_user_ref: 7 }],
    ['client_user_ref an object', { agent_id: agentId, client_user_ref: { a: 1 } }],
    ['client_user_ref over 256', { agent_id: agentId, client_user_ref: 'u'.repeat(257) }],
    ['auth_token a number', { agent_id: agentId, auth_token: 1 }],
    ['empty body', ''],
  ];
  for (const [what, body] of cases) {
    const res = await s.connect(body);
    t.is(res.status, 400, `${what}: ${res.text}`);
    t.true(isSessionError(res.body, 'invalid_request'), what);
  }
  const over = await s.connect({ agent_id: agentId, pad: 'x'.repeat(SESSION_API_LIMITS.maxConnectBodyBytes) });
  t.is(over.status, 413, over.text);
  t.true(isSessionError(over.body, 'payload_too_large'));
  const ok = await s.connect({ agent_id: agentId, client_user_ref: 'u'.repeat(256) });
  t.is(ok.status, 200, '256 characters are allowed');
  await s.release(roomOf(ok.body.room_url));
  for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
    const res = await s.connect({ agent_id: agentId }, { 'content-type': type });
    t.is(res.status, 415, type);
    t.true(isSessionError(res.body, 'unsupported_media_type'));
  }
  // The 256-character session above was released; once it has ended, nothing else is live.
  await until(async () => s.live.sessions.size === 0, { timeoutMs: 10_000, intervalMs: 50, what: 'no live session left (no refused request admitted anything)' });
});

test.serial('the allowlist through real Origin headers: exact hostnames, *, none, and tricks', async (t) => {
  const listed = await s.agent({ allowed_hostnames: ['shop.example.com', 'LOCALHOST'] });
  const open = await s.agent({ allowed_hostnames: ['*'] });
  const privateEmpty = await s.agent({ allowed_hostnames: [] });
  const privateNull = await s.agent({ allowed_hostnames: null });
  const admitted: string[] = [];
  const expect = async (agentId: string, origin: string | undefined, status: number) => {
    const res = await s.connect({ agent_id: agentId }, origin === undefined ? {} : { origin });
    t.is(res.status, status, `${origin} -> ${res.text}`);
    if (status === 403) t.true(isSessionError(res.body, 'auth_failed'));
    if (res.status === 200) admitted.push(roomOf(res.body.room_url));
  };
  await expect(listed, 'https://shop.example.com', 200);
  await expect(listed, 'http://localhost:5173', 200);
  await expect(listed, undefined, 403);
  for (const trick of ['https://example.com', 'https://a.shop.example.com', 'https://shop.example.com.evil.net', 'https://evil.net@shop.example.com', 'null', 'https://shop.example.com/path', 'https://shop.example.co']) {
    await expect(listed, trick, 403);
  }
  await expect(open, 'https://anything.example', 200);
  await expect(open, undefined, 200);
  // `*` admits every origin (spec, Authentication 4): the opaque null of a sandboxed frame too; not a non-origin.
  await expect(open, 'null', 200);
  await expect(open, 'https://anything.example/path', 403);
  for (const agentId of [privateEmpty, privateNull]) {
    await expect(agentId, 'https://shop.example.com', 403);
    await expect(agentId, undefined, 403);
  }
  for (const room of admitted) t.deepEqual((await s.release(room)).body, { released: 1 });
});

test.serial('auth_enabled: only a valid connect token from the site backend admits', async (t) => {
  const created = await s.call('POST', '/v1/agents', { body: { title: 'secured' } });
  const agentId = created.body.agent_id;
  const enabled = await s.call('PATCH', `/v1/agents/${agentId}`, { body: { auth_enabled: true, allowed_hostnames: ['*'] } });
  t.is(enabled.status, 200);
  const secret: string | null = enabled.body.auth_secret ?? (await s.call('GET', `/v1/agents/${agentId}`)).body.auth_secret;
  // The secret is shown once: either on the PATCH that enabled auth or, for agents created with it, on creation.
  t.truthy(secret, 'the secret is returned when auth is enabled');
  await s.call('PATCH', `/v1/agents/${agentId}/status`, { body: { status: 'published' } });
  const refuse = async (body: Record<string, unknown>, why: RegExp) => {
    const res = await s.connect({ agent_id: agentId, ...body });
    t.is(res.status, 403);
    t.true(isSessionError(res.body, 'auth_failed'));
    t.regex(res.body.message, why);
  };
  await refuse({}, /requires an auth_token/);
  await refuse({ auth_token: mintConnectToken('wrong-secret', agentId) }, /signature/);
  await refuse({ auth_token: mintConnectToken(secret!, agentId, { expiresAt: Math.floor(Date.now() / 1000) - 120 }) }, /expired/);
  await refuse({ auth_token: mintConnectToken(secret!, agentId, { clientUserRef: 'alice' }), client_user_ref: 'mallory' }, /signature/);
  const ok = await s.connect({ agent_id: agentId, client_user_ref: 'alice', auth_token: mintConnectToken(secret!, agentId, { clientUserRef: 'alice' }) });
  t.is(ok.status, 200, ok.text);
  t.deepEqual((await s.release(roomOf(ok.body.room_url))).body, { released: 1 });
});

test.serial('rotate-auth-secret: a new secret returned once, tokens of the old one refused from then on; another organization gets 404', async (t) => {
  const created = await s.call('POST', '/v1/agents', { body: { title: 'rotated', auth_enabled: true, allowed_hostnames: ['*'] } });
  const agentId = created.body.agent_id;
  const oldSecret: string = created.body.auth_secret;
  t.truthy(oldSecret);
  await s.call('PATCH', `/v1/agents/${agentId}/status`, { body: { status: 'published' } });
  const oldToken = mintConnectToken(oldSecret, agentId);
  const before = await s.connect({ agent_id: agentId, auth_token: oldToken });
  t.is(before.status, 200, before.text);
  t.deepEqual((await s.release(roomOf(before.body.room_url))).body, { released: 1 });

  t.is((await s.call('POST', `/v1/agents/${agentId}/rotate-auth-secret`, { key: s.keyB })).status, 404, 'another organization');
  const rotated = await s.call('POST', `/v1/agents/${agentId}/rotate-auth-secret`);
  t.is(rotated.status, 200, rotated.text);
  const newSecret: string = rotated.body.auth_secret;
  t.regex(newSecret, /^svc_as_/);
  t.not(newSecret, oldSecret);
  t.like(rotated.body, { agent_id: agentId, auth_enabled: true, auth_secret_set: true });
  t.is((await s.call('GET', `/v1/agents/${agentId}`)).body.auth_secret ?? null, null, 'shown once');

  const refused = await s.connect({ agent_id: agentId, auth_token: oldToken });
  t.is(refused.status, 403);
  t.true(isSessionError(refused.body, 'auth_failed'));
  t.regex(refused.body.message, /signature/);
  const ok = await s.connect({ agent_id: agentId, auth_token: mintConnectToken(newSecret, agentId) });
  t.is(ok.status, 200, ok.text);
  t.deepEqual((await s.release(roomOf(ok.body.room_url))).body, { released: 1 });
  t.truthy((await s.call('GET', '/v1/openapi.json')).body.paths['/agents/{agent_id}/rotate-auth-secret']?.post, 'in the OpenAPI document');
});

test.serial('concurrency_limit (429) with retry_after_seconds and Retry-After; a released slot admits again; -1 is unbounded', async (t) => {
  const agentId = await s.agent({ max_concurrency: 2, session_limit_seconds: 120 });
  const first = await s.connect({ agent_id: agentId });
  const second = await s.connect({ agent_id: agentId });
  t.is(first.status, 200);
  t.is(second.status, 200);
  const third = await s.connect({ agent_id: agentId });
  t.is(third.status, 429);
  t.true(isSessionError(third.body, 'concurrency_limit'));
  t.true(Number.isInteger(third.body.retry_after_seconds) && third.body.retry_after_seconds >= 1 && third.body.retry_after_seconds <= 120, String(third.body.retry_after_seconds));
  t.is(third.headers.get('retry-after'), String(third.body.retry_after_seconds));
  t.regex(third.headers.get('access-control-expose-headers') ?? '', /Retry-After/);
  t.deepEqual((await s.release(roomOf(first.body.room_url))).body, { released: 1 });
  const again = await until(async () => {
    const res = await s.connect({ agent_id: agentId });
    return res.status === 200 && res;
  }, { timeoutMs: 10_000, intervalMs: 50, what: 'a freed slot' });
  for (const r of [second, again]) await s.release(roomOf(r.body.room_url));

  const unbounded = await s.agent({ max_concurrency: -1 });
  const many = await Promise.all([1, 2, 3].map(() => s.connect({ agent_id: unbounded })));
  t.deepEqual(many.map((r) => r.status), [200, 200, 200]);
  for (const r of many) await s.release(roomOf(r.body.room_url));
});

test.serial('room_creation_failed (502) when the room provider cannot create a room; the call is recorded failed', async (t) => {
  const agentId = await s.agent({ max_concurrency: -1 });
  const held: string[] = [];
  // This server was started with at most 6 rooms: fill them.
  for (;;) {
    const res = await s.connect({ agent_id: agentId });
    if (res.status !== 200) {
      t.is(res.status, 502, res.text);
      t.true(isSessionError(res.body, 'room_creation_failed'));
      break;
    }
    held.push(roomOf(res.body.room_url));
    if (held.length > 10) return t.fail('the room limit was never reached');
  }
  const calls = (await s.call('GET', `/v1/agents/${agentId}/calls?limit=100`)).body.data as any[];
  const failed = calls.filter((c) => c.status === 'failed');
  t.is(failed.length, 1);
  t.like(failed[0], { termination_reason: 'room_creation_failed', failure_reason: 'room_creation_failed' });
  for (const room of held) await s.release(room);
});

test.serial('orchestrator_error (502) when the bot cannot start; the call is recorded failed and the slot freed', async (t) => {
  // A face configuration of a variant whose plugin cannot open sessions (the harness's catalogue-only test face).
  const config = await s.call('POST', '/v1/model-configs', { body: { title: `catalogue only ${Math.random()}`, model_variant_id: 'svc/test-portrait/v1' } });
  t.is(config.status, 201, config.text);
  const agentId = await s.agent({ face_id: config.body.model_config_id, max_concurrency: 1 });
  const res = await s.connect({ agent_id: agentId });
  t.is(res.status, 502, res.text);
  t.true(isSessionError(res.body, 'orchestrator_error'));
  const calls = (await s.call('GET', `/v1/agents/${agentId}/calls`)).body.data as any[];
  t.is(calls.length, 1);
  t.like(calls[0], { status: 'failed', termination_reason: 'bot_start_failed', failure_reason: 'bot_start_failed' });
  t.truthy(calls[0].metadata.failure_detail);
  // The slot was freed: another attempt is not refused with concurrency_limit.
  t.is((await s.connect({ agent_id: agentId })).status, 502);
  t.is(s.live.sessions.size, 0);
});

test.serial('the Session API is in the OpenAPI document', async (t) => {
  const doc = (await s.call('GET', '/v1/openapi.json', { key: null })).body;
  t.truthy(doc.paths['/public/agents/connect']?.post);
  t.truthy(doc.paths['/public/agents/connect/{room}']?.post);
  t.truthy(doc.paths['/public/agents/connect'].post.responses['429']);
});
