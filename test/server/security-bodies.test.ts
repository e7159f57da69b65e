/**
 * Issue 32, item 6: a request body over its route's cap is answered 413 `payload_too_large` in
 * the route's error shape with `Connection: close`, and the connection is closed: the rest of the
 * body is never read (it used to be drained on a kept-alive socket: 128 MB over 45 s after a
 * 400), and an oversize chunked body is not mistaken for the client's hang-up (`request_aborted`).
 */
import test from 'ava';
import net from 'node:net';
import { until } from '../../testing/until.ts';
import { SESSION_API_LIMITS } from '../../server/sessions/session-routes.ts';
import { startSessionServer, type SessionTestServer } from '../sessions/session-harness.ts';
import { firstResponse } from './security-helpers.ts';

let s: SessionTestServer;
test.before(async () => {
  s = await startSessionServer('sec_bodies');
});
test.after.always(async () => {
  await s?.stop();
});

/** What the client could send before the server closed: far less than this means it was not drained. */
const OFFERED_BYTES = 48 * 1024 * 1024;
/** Loopback socket buffers (both sides) hold a few MiB; past this the server was reading. */
const UNREAD_BOUND_BYTES = 16 * 1024 * 1024;

interface Streamed {
  readonly text: string;
  /** Body bytes the client managed to write before the connection closed (or it gave up). */
  readonly sent: number;
  /** The server closed the connection (not the client giving up after OFFERED_BYTES). */
  readonly closedByServer: boolean;
}

/**
 * Sends the request head, then a chunked body of 64 KiB chunks as fast as the socket takes them,
 * up to OFFERED_BYTES, reading the answer meanwhile; ends when the server closes the connection,
 * or 5 s after everything was offered (a bound for a slow machine, not a timing goal).
 */
function streamChunked(head: string): Promise<Streamed> {
  const { hostname, port } = new URL(s.url);
  return new Promise((resolve) => {
    const socket = net.connect(Number(port), hostname);
    const chunk = Buffer.concat([Buffer.from('10000\r\n'), Buffer.alloc(0x10000, 0x20), Buffer.from('\r\n')]);
    let text = '';
    let sent = 0;
    let closed = false;
    let giveUp: NodeJS.Timeout | undefined;
    const finish = (closedByServer: boolean) => {
      if (closed) return;
      closed = true;
      clearTimeout(giveUp);
      socket.destroy();
      resolve({ text, sent, closedByServer });
    };
    const pump = () => {
      while (!closed && sent < OFFERED_BYTES) {
        sent += 0x10000;
        if (!socket.write(chunk)) return void socket.once('drain', pump);
      }
      if (!closed) giveUp = setTimeout(() => finish(false), 5_000);
    };
    socket.on('data', (d) => (text += d.toString('latin1')));
    socket.on('end', () => finish(true));
    socket.on('close', () => finish(true));
    socket.on('error', () => finish(true));
    socket.on('connect', () => {
      socket.write(head);
      pump();
    });
  });
}

const chunkedHead = (path: string, headers: Record<string, string> = {}) =>
  `POST ${path} HTTP/1.1\r\nHost: ${new URL(s.url).host}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;

test('REST: a chunked body over 1 MiB is 413 payload_too_large (not request_aborted) with Connection: close, and the rest is never read', async (t) => {
  const res = await streamChunked(chunkedHead('/v1/agents', { 'X-API-Key': s.keyA }));
  const answer = firstResponse(res.text);
  t.is(answer.status, 413, res.text.slice(0, 300));
  t.is(answer.body.code, 'payload_too_large');
  t.is(answer.headers.connection, 'close');
  t.true(res.closedByServer, 'the server closed the connection');
  t.true(res.sent < UNREAD_BOUND_BYTES, `the body was not drained (${res.sent} bytes accepted)`);
});

test('REST: a declared Content-Length over the cap is refused before a byte is read, and the connection closed', async (t) => {
  const { hostname, port } = new URL(s.url);
  const socket = net.connect(Number(port), hostname);
  t.teardown(() => socket.destroy());
  let text = '';
  socket.on('data', (d) => (text += d.toString('latin1')));
  const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
  socket.on('error', () => undefined);
  socket.write(`POST /v1/agents HTTP/1.1\r\nHost: ${new URL(s.url).host}\r\nX-API-Key: ${s.keyA}\r\nContent-Type: application/json\r\nContent-Length: ${128 * 1024 * 1024}\r\n\r\n{"title":`);
  await closed;
  const answer = firstResponse(text);
  t.is(answer.status, 413);
  t.is(answer.body.code, 'payload_too_large');
  t.is(answer.headers.connection, 'close');
});

test('Session API: a chunked connect body over 16 KiB, and a release body over 64 KiB, are 413 in the Session API shape with Connection: close, never drained', async (t) => {
  for (const [path, cap] of [['/v1/public/agents/connect', SESSION_API_LIMITS.maxConnectBodyBytes], ['/v1/public/agents/connect/s_whatever', SESSION_API_LIMITS.maxReleaseBodyBytes]] as const) {
    const res = await streamChunked(chunkedHead(path, { Origin: 'https://site.example' }));
    const answer = firstResponse(res.text);
    t.is(answer.status, 413, `${path}: ${res.text.slice(0, 300)}`);
    t.deepEqual(Object.keys(answer.body).sort(), ['error_code', 'message'], path);
    t.is(answer.body.error_code, 'payload_too_large', path);
    t.is(answer.body.message, `request body exceeds ${cap} bytes`, path);
    t.is(answer.headers.connection, 'close', path);
    t.true(res.closedByServer, `${path}: the server closed the connection`);
    t.true(res.sent < UNREAD_BOUND_BYTES, `${path}: the body was not drained (${res.sent} bytes accepted)`);
  }
  t.is(s.live.sessions.size, 0, 'nothing admitted');
});

test('after a refused body the server goes on serving (a fresh connection)', async (t) => {
  await streamChunked(chunkedHead('/v1/agents', { 'X-API-Key': s.keyA }));
  const res = await s.call('GET', '/v1/agents');
  t.is(res.status, 200);
});

test('a 413 reaches a client that reads it late: the connection is closed with a FIN after the answer, not reset under it (lingering close)', async (t) => {
  // The client keeps writing its body and reads nothing until the server has answered and closed
  // its side. A socket closed with unread data in its buffer sends a reset, and a reset makes the
  // client's kernel drop what it received and had not read: the client saw the connection reset
  // and no answer (a loaded CI run, issue 23). The answer is read only after the server is done.
  const { hostname, port } = new URL(s.url);
  let serverSide: net.Socket | undefined;
  const client = net.connect(Number(port), hostname);
  client.pause();
  const onConnection = (socket: net.Socket) => {
    if (socket.remotePort === client.localPort) serverSide = socket;
  };
  s.server.httpServer.on('connection', onConnection);
  t.teardown(() => {
    s.server.httpServer.off('connection', onConnection);
    client.destroy();
  });
  const errors: string[] = [];
  client.on('error', (e: NodeJS.ErrnoException) => errors.push(e.code ?? e.message));
  // A reset fails the client's pending writes: Node destroys its socket, and what it had not read is lost.
  const closed = new Promise<void>((resolve) => client.once('close', () => resolve()));
  await new Promise<void>((resolve) => client.once('connect', () => resolve()));
  client.write(chunkedHead('/v1/agents', { 'X-API-Key': s.keyA }));
  const chunk = Buffer.concat([Buffer.from('10000\r\n'), Buffer.alloc(0x10000, 0x20), Buffer.from('\r\n')]);
  // Over the cap (1 MiB), well short of what the socket buffers hold: every byte is written
  // without waiting, and the server has the whole excess unread when it answers.
  for (let i = 0; i < 200; i++) client.write(chunk);
  // The server answered and sent its FIN (old code: and closed the socket, in the same step).
  await until(async () => serverSide?.writableFinished === true || serverSide?.destroyed === true, { timeoutMs: 15_000, intervalMs: 20, what: 'the server to answer and end its side' });
  // (Node destroys a socket closed after a `Connection: close` answer in that same 'finish' step.)
  let text = '';
  client.on('data', (d) => (text += d.toString('latin1')));
  client.once('end', () => client.destroy());
  client.resume();
  await closed;
  t.true(text.includes('\r\n\r\n'), `an answer arrives (received ${JSON.stringify(text.slice(0, 120))}; client errors: ${errors.join(', ') || 'none'})`);
  const answer = firstResponse(text);
  t.is(answer.status, 413, `received ${JSON.stringify(text.slice(0, 200))}, errors ${errors.join(', ')}`);
  t.is(answer.body.code, 'payload_too_large');
  t.is(answer.headers.connection, 'close');
});
