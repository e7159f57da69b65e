/**
 * Issue 17 item 3: a client-supplied LiveKit url passes the SSRF address policy of tool webhooks,
 * the SDK is pinned to the checked address, and every failure reads the same. Real SDK
 * (@livekit/rtc-node) against the local fake LiveKit server (test/fakes/livekit-server.ts), and
 * the real /realtime endpoint for the client's view.
 */
import { createServer as createTcpServer, type AddressInfo, type Server as TcpServer } from 'node:net';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer as createTlsServer, type TLSSocket } from 'node:tls';
import test from 'ava';
import { until } from '../../testing/until.ts';
import { NEVER } from 'rxjs';
import { dispose } from '@livekit/rtc-node';
import { AccessToken } from 'livekit-server-sdk';
import { facePlugin } from '../../plugins/face/index.ts';
import type { HostResolver } from '../../processors/tools/webhook-target.ts';
import { LIVEKIT_JOIN_FAILED, liveKitAddressPolicy, publishToLiveKit, resolveLiveKitTarget, startPinnedRelay } from '../../transports/livekit/index.ts';
import { publishAvatar, RoomError } from '../../transports/webrtc/index.ts';
import { startLiveKitServerFake, type LiveKitServerFake } from '../fakes/livekit-server.ts';
import { connectRaw, isError, isReady } from '../realtime/ws-conn.ts';
import { startTestServer } from '../server/harness.ts';

test.after.always(async () => {
  await dispose();
});

async function startFake(t: { teardown(fn: () => Promise<void> | void): void }): Promise<LiveKitServerFake> {
  const fake = await startLiveKitServerFake();
  t.teardown(() => fake.close());
  return fake;
}

async function avatarToken(fake: LiveKitServerFake, room: string): Promise<string> {
  const at = new AccessToken(fake.apiKey, fake.apiSecret, { identity: `avatar-${room}`, ttl: 600 });
  at.addGrant({ roomJoin: true, room, canPublish: true, canSubscribe: false });
  return at.toJwt();
}

async function listening<T extends TcpServer>(server: T, t: { teardown(fn: () => Promise<void> | void): void }): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return (server.address() as AddressInfo).port;
}

test.serial('by default a LiveKit url on loopback or a private network is refused before anything connects', async (t) => {
  const fake = await startFake(t);
  const jwt = await avatarToken(fake, 'room-ssrf');
  const port = new URL(fake.url).port;
  const urls = [fake.url, `ws://localhost:${port}`, `ws://[::1]:${port}`, `ws://[::ffff:127.0.0.1]:${port}`, `ws://2130706433:${port}`, 'ws://10.0.0.1:7880', 'wss://169.254.169.254', 'ws://192.168.1.1'];
  for (const url of urls) {
    const error = await t.throwsAsync(publishAvatar(NEVER, { provider: 'livekit', url, token: jwt }), { instanceOf: RoomError }, url);
    t.is(error!.code, 'publish_failed', url);
    t.is(error!.message, LIVEKIT_JOIN_FAILED, url);
  }
  t.deepEqual(fake.participants, [], 'nobody joined');
  t.deepEqual(fake.refusedUpgrades, [], 'no upgrade reached the server');
  t.deepEqual(fake.validations, [], 'no validation request reached the server');
});

test.serial('refused address, unresolvable name, closed port and a bad handshake all give one neutral error', async (t) => {
  const closed = createTcpServer();
  await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
  const closedPort = (closed.address() as AddressInfo).port;
  await new Promise<void>((resolve) => closed.close(() => resolve())); // now nothing listens there
  const garbage = createTcpServer((socket) => socket.resume().end('SSH-2.0-OpenSSH_9.6\r\n')); // resume: read the peer's close
  const garbagePort = await listening(garbage, t);
  const http = createHttpServer((_req, res) => res.writeHead(404).end('not here'));
  const httpPort = await listening(http, t);
  const noName: HostResolver = async () => {
    throw Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' });
  };
  const allowLoopback = ['127.0.0.0/8'];
  const cases: Array<[string, Parameters<typeof publishToLiveKit>[1]]> = [
    ['refused address', { url: 'ws://127.0.0.1:7880', token: 't' }],
    ['unresolvable name', { url: 'wss://lk.example.invalid', token: 't', resolver: noName }],
    ['closed port', { url: `ws://127.0.0.1:${closedPort}`, token: 't', livekitAllowedRanges: allowLoopback }],
    ['not a LiveKit server', { url: `ws://127.0.0.1:${garbagePort}`, token: 't', livekitAllowedRanges: allowLoopback }],
    ['HTTP server, no upgrade', { url: `ws://127.0.0.1:${httpPort}`, token: 't', livekitAllowedRanges: allowLoopback }],
  ];
  for (const [what, options] of cases) {
    const error = await t.throwsAsync(publishToLiveKit(NEVER, options), { instanceOf: RoomError }, what);
    t.is(error!.code, 'publish_failed', what);
    t.is(error!.message, LIVEKIT_JOIN_FAILED, what);
    t.truthy(error!.cause, `${what}: the detail is kept for the log`);
  }
});

test.serial('the SDK is pinned to the checked address: a name that never resolves for the SDK still reaches the room, resolved once', async (t) => {
  const fake = await startFake(t);
  const port = new URL(fake.url).port;
  const asked: string[] = [];
  // `.invalid` never resolves in DNS (RFC 6761): if the SDK resolved the name itself, it could not connect.
  const resolver: HostResolver = async (hostname) => {
    asked.push(hostname);
    return [{ address: '127.0.0.1', family: 4 }];
  };
  const published = await publishToLiveKit(NEVER, { url: `ws://livekit.pinned.invalid:${port}`, token: await avatarToken(fake, 'room-pin'), resolver, livekitAllowedRanges: ['127.0.0.0/8'] });
  t.teardown(() => published.close());
  t.is(published.room, 'room-pin');
  t.is(fake.participants.length, 1);
  t.deepEqual(asked, ['livekit.pinned.invalid'], 'resolved once, by us');
  await published.close();
});

test.serial('a name resolving to a public and a private address is refused (every answer must pass, so DNS cannot steer to the private one)', async (t) => {
  const resolver: HostResolver = async () => [
    { address: '93.184.216.34', family: 4 },
    { address: '127.0.0.1', family: 4 },
  ];
  const error = await t.throwsAsync(publishToLiveKit(NEVER, { url: 'wss://rebind.example', token: 't', resolver }), { instanceOf: RoomError });
  t.is(error!.message, LIVEKIT_JOIN_FAILED);
  t.regex(String((error!.cause as Error).message), /127\.0\.0\.1.*loopback/);
});

test.serial('through /realtime: a webrtc message to a loopback LiveKit url gets the neutral webrtc_failed; the operator setting opens it', async (t) => {
  t.timeout(60_000); // 15 s on a quiet 2-core machine; bounded at about four times that
  const fake = await startFake(t);
  const jwt = await avatarToken(fake, 'room-rt');
  for (const allowed of [undefined, ['127.0.0.0/8']]) {
    // Face sessions admitted by slots only: these tests open several at once, and a loaded test machine's
  // late frames would refuse one at random; the late-frame rule has its own tests (operations-overload).
    const ts = await startTestServer({ label: 'livekit_ssrf', pglite: true, plugins: [facePlugin], config: { capacityLoadCheck: false, ...(allowed ? { livekitAllowedRanges: allowed } : {}) }, surfaces: { realtime: true, rooms: true } });
    try {
      const c = connectRaw(`${ts.url.replace(/^http/, 'ws')}/realtime?config_id=svc/human-portrait`, { 'x-api-key': ts.keyA });
      await c.next(isReady);
      c.ws.send(JSON.stringify({ type: 'webrtc', settings: { provider: 'livekit', url: fake.url, token: jwt } }));
      if (!allowed) {
        const failed = await c.next(isError('webrtc_failed'), 30_000);
        t.is(failed.type === 'error' ? failed.message : '', `could not publish to the room: ${LIVEKIT_JOIN_FAILED}`);
        t.deepEqual(fake.participants, []);
      } else {
        t.like(await c.next((m) => m.type === 'webrtc_connected', 30_000), { room: 'room-rt' });
        t.is(fake.participants.length, 1);
      }
      c.ws.close();
      await c.closed;
      // Ending the session takes the avatar out of the room (a bound for a slow machine).
      await until(() => fake.participants.every((p) => p.state === 'disconnected'), { timeoutMs: 15_000, intervalMs: 25, what: 'the avatar to leave the room' });
      t.true(fake.participants.every((p) => p.state === 'disconnected'), 'the avatar left the room');
    } finally {
      await ts.stop();
    }
  }
});

function selfSignedCertificate(host: string): { key: string; cert: string } {
  const dir = mkdtempSync(join(tmpdir(), 'livekit-tls-'));
  try {
    execFileSync('openssl', [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'), '-days', '1',
      '-subj', `/CN=${host}`, '-addext', `subjectAltName=DNS:${host}`,
    ], { stdio: 'ignore' });
    return { key: readFileSync(join(dir, 'key.pem'), 'utf8'), cert: readFileSync(join(dir, 'cert.pem'), 'utf8') };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Sends one request head through the relay and returns what came back ('' when the relay hung up). */
async function throughRelay(relayUrl: string, path: string): Promise<string> {
  const { port } = new URL(relayUrl);
  const { connect } = await import('node:net');
  return new Promise((resolve) => {
    const socket = connect(Number(port), '127.0.0.1');
    let answer = '';
    socket.on('data', (d) => (answer += d.toString('latin1')));
    socket.on('error', () => undefined);
    socket.on('close', () => resolve(answer));
    socket.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nConnection: close\r\n\r\n`);
  });
}

test.serial('wss:// through the relay: TLS to the pinned address, SNI and certificate check against the url host, the url Host header', async (t) => {
  const host = 'livekit.tls.invalid';
  const { key, cert } = selfSignedCertificate(host);
  const seen: Array<{ servername: string | false | null; head: string }> = [];
  const server = createTlsServer({ key, cert }, (socket: TLSSocket) => {
    socket.once('data', (d) => {
      seen.push({ servername: socket.servername, head: d.toString('latin1') });
      socket.end('HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok');
    });
    socket.on('error', () => undefined);
  });
  const port = await listening(server, t);
  const toLoopback: HostResolver = async () => [{ address: '127.0.0.1', family: 4 }];
  const policy = liveKitAddressPolicy(['127.0.0.1/32']);

  const target = await resolveLiveKitTarget(`wss://${host}:${port}/lk?region=x`, policy, toLoopback);
  const relay = await startPinnedRelay(target, { ca: cert });
  t.teardown(() => relay.close());
  t.is(relay.url, `ws://127.0.0.1:${new URL(relay.url).port}/lk?region=x`, 'the SDK keeps the path and query, never sees the name');
  t.regex(await throughRelay(relay.url, '/lk/rtc?access_token=t'), /200 OK/);
  t.is(seen.length, 1);
  t.is(seen[0]!.servername, host, 'SNI carried the url host');
  t.regex(seen[0]!.head, new RegExp(`^GET /lk/rtc\\?access_token=t HTTP/1.1\r\nHost: ${host.replaceAll('.', '\\.')}:${port}\r\n`), 'Host is the url host, once');
  t.notRegex(seen[0]!.head, /127\.0\.0\.1/);

  // Same address, another name: the certificate does not match, the relay hangs up, nothing is served.
  const wrong = await resolveLiveKitTarget(`wss://other.invalid:${port}`, policy, toLoopback);
  const wrongRelay = await startPinnedRelay(wrong, { ca: cert });
  t.teardown(() => wrongRelay.close());
  t.is(await throughRelay(wrongRelay.url, '/rtc'), '');
  t.is(seen.length, 1);
});
