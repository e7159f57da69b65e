import test from 'ava';
import { isErrorBody, startTestServer, type TestServer } from './harness.ts';
import { firstResponse, hasResponses, rawExchange } from './security-helpers.ts';

// Issue 17 item 1: every upgrade is claimed, refused or served; idle sockets are not held.

let s: TestServer;
test.before(async () => {
  // Short header timeout so the idle-socket test ends quickly; everything else as in production,
  // with a real WebSocket endpoint (/realtime) in the upgrade table (its upgrade listener is what
  // used to leave other paths unanswered).
  s = await startTestServer({ label: 'sec_upgrades', config: { headersTimeoutMs: 400, requestTimeoutMs: 5_000 }, surfaces: { realtime: true } });
});
test.after.always(async () => {
  await s?.stop();
});

const host = () => new URL(s.url).host;
const wsOffer = (path: string) =>
  `GET ${path} HTTP/1.1\r\nHost: ${host()}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`;
const h2cOffer = (method: string, path: string, extra = '', body = '') =>
  `${method} ${path} HTTP/1.1\r\nHost: ${host()}\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\nX-API-Key: ${s.keyA}\r\n${extra}${body ? `Content-Length: ${Buffer.byteLength(body)}\r\n` : ''}\r\n${body}`;

test('a WebSocket upgrade on a REST path is answered 404 route_not_found in the error shape and the socket released', async (t) => {
  for (const path of ['/v1/agents', '/nowhere', '/realtime/extra']) {
    const res = await rawExchange(s.url, wsOffer(path));
    t.true(res.closed, `${path}: the server closed the socket`);
    const answer = firstResponse(res.text);
    t.is(answer.status, 404, path);
    t.is(answer.body.code, 'route_not_found');
    t.true(isErrorBody(answer.body));
    t.is(answer.headers.connection, 'close');
  }
});

test('an h2c upgrade offer (curl --http2) on a REST path is served as plain HTTP/1.1, keep-alive included', async (t) => {
  const second = `GET /v1/model-variants HTTP/1.1\r\nHost: ${host()}\r\nX-API-Key: ${s.keyA}\r\n\r\n`;
  const res = await rawExchange(s.url, h2cOffer('GET', '/v1/agents') + second, { until: (text) => hasResponses(text, 2) });
  const first = firstResponse(res.text);
  t.is(first.status, 200, res.text.slice(0, 300));
  t.true(Array.isArray(first.body.data));
  t.false('upgrade' in first.headers, 'no switch of protocol');
  const next = firstResponse(first.rest);
  t.is(next.status, 200, 'the same connection serves the next request');
  t.true(Array.isArray(next.body.data));
});

test('an h2c upgrade offer with a JSON body is served with its body', async (t) => {
  const body = JSON.stringify({ title: 'via h2c offer' });
  const res = await rawExchange(s.url, h2cOffer('POST', '/v1/agents', 'Content-Type: application/json\r\n', body), { until: (text) => hasResponses(text, 1) });
  const answer = firstResponse(res.text);
  t.is(answer.status, 201, res.text.slice(0, 300));
  t.is(answer.body.title, 'via h2c offer');
});

test('registered WebSocket paths are still claimed by their endpoint', async (t) => {
  const res = await rawExchange(s.url, wsOffer('/realtime'), { until: (text) => text.includes('\r\n\r\n') });
  const status = Number(res.text.split(' ')[1]);
  t.true(status === 101 || status === 401 || status === 403, res.text.slice(0, 200));
});

test('a socket that connects and sends nothing is answered 408 in the error shape and closed', async (t) => {
  const idle = await rawExchange(s.url, null);
  t.true(idle.closed, 'not held open');
  const answer = firstResponse(idle.text);
  t.is(answer.status, 408);
  t.is(answer.body.code, 'request_timeout');
  t.true(isErrorBody(answer.body));
  const partial = await rawExchange(s.url, `GET /v1/agents HTTP/1.1\r\nHost: ${host()}\r\nX-Api`);
  t.true(partial.closed, 'headers that never end do not hold the socket');
  t.is(firstResponse(partial.text).status, 408);
});
