/**
 * The embedded rooms across NATs (issue 27), on loopback with real libwebrtc on both sides: the
 * settings and their one-line refusals, coturn's shared-secret credentials handed to the visitor
 * in `joined` (and expiring with the room), the announced address in place of the private host
 * addresses, the port range (and its exhaustion: a clear error for that visitor, not a crash),
 * and an ICE restart asked by the visitor on a live peer connection.
 * The same settings across a real NAT with coturn and chromium: test/webrtc/nat*.test.ts.
 */
import test from 'ava';
import { createHmac } from 'node:crypto';
import { createSocket } from 'node:dgram';
import { NEVER } from 'rxjs';
import { WebSocket } from 'ws';
import { loadConfigFromEnv } from '../../server/config/env.ts';
import { until } from '../../testing/until.ts';
import { publishAvatar, RoomRegistry, type RoomSubscriberEvent, type SignallingServerMessage } from '../../transports/webrtc/index.ts';
import {
  announceCandidate, announceInSdp, iceServerAddresses, iceServersFor, mintTurnCredential, RTC_NETWORK_DEFAULTS, rtcNetworkFromStrings, type RtcNetworkSettings,
} from '../../transports/webrtc/rtc-network.ts';
import { wrtcWithSources } from '../../transports/webrtc/wrtc.ts';
import { startRoomServer, type RoomTestServer } from './browser.ts';

const SECRET = 'a-shared-secret-of-coturn';

test('the settings: every one read, and a bad value of any of them is one line naming it', (t) => {
  const ok = rtcNetworkFromStrings({
    SVC_ICE_SERVERS: 'stun:stun.example.com:3478, stun:198.51.100.9',
    SVC_TURN_SECRET: SECRET,
    SVC_TURN_URLS: 'turn:198.51.100.5:3478?transport=udp,turn:198.51.100.5:3478?transport=tcp',
    SVC_TURN_TTL_S: '900',
    SVC_RTC_ANNOUNCED_ADDRESS: '203.0.113.7',
    SVC_RTC_PORT_MIN: '40000',
    SVC_RTC_PORT_MAX: '40099',
    SVC_ICE_TRANSPORT_POLICY: 'relay',
  });
  t.deepEqual(ok.iceServers, [{ urls: ['stun:stun.example.com:3478', 'stun:198.51.100.9'] }]);
  t.deepEqual(ok.turn, { secret: SECRET, urls: ['turn:198.51.100.5:3478?transport=udp', 'turn:198.51.100.5:3478?transport=tcp'], ttlS: 900 });
  t.is(ok.announcedAddress, '203.0.113.7');
  t.deepEqual(ok.portRange, { min: 40000, max: 40099 });
  t.is(ok.iceTransportPolicy, 'relay');
  t.deepEqual(rtcNetworkFromStrings({}), RTC_NETWORK_DEFAULTS, 'nothing set: host candidates only, any port');
  const json = rtcNetworkFromStrings({ SVC_ICE_SERVERS: '[{"urls":"turn:turn.example.com:443?transport=tcp","username":"u","credential":"c"}]' });
  t.deepEqual(json.iceServers, [{ urls: ['turn:turn.example.com:443?transport=tcp'], username: 'u', credential: 'c' }]);

  const bad: [Record<string, string>, string][] = [
    [{ SVC_ICE_SERVERS: 'http://stun.example.com' }, 'SVC_ICE_SERVERS'],
    [{ SVC_ICE_SERVERS: 'turn:turn.example.com' }, 'SVC_ICE_SERVERS'],
    [{ SVC_ICE_SERVERS: '[{"urls":"turn:x"}]' }, 'SVC_ICE_SERVERS'],
    [{ SVC_ICE_SERVERS: '[not json' }, 'SVC_ICE_SERVERS'],
    [{ SVC_TURN_SECRET: SECRET }, 'SVC_TURN_URLS'],
    [{ SVC_TURN_URLS: 'turn:198.51.100.5' }, 'SVC_TURN_SECRET'],
    [{ SVC_TURN_SECRET: 'short', SVC_TURN_URLS: 'turn:198.51.100.5' }, 'SVC_TURN_SECRET'],
    [{ SVC_TURN_SECRET: SECRET, SVC_TURN_URLS: 'stun:198.51.100.5' }, 'SVC_TURN_URLS'],
    [{ SVC_TURN_SECRET: SECRET, SVC_TURN_URLS: 'turn:198.51.100.5', SVC_TURN_TTL_S: '10' }, 'SVC_TURN_TTL_S'],
    [{ SVC_TURN_TTL_S: '600' }, 'SVC_TURN_TTL_S'],
    [{ SVC_RTC_ANNOUNCED_ADDRESS: 'my.host.example' }, 'SVC_RTC_ANNOUNCED_ADDRESS'],
    [{ SVC_RTC_ANNOUNCED_ADDRESS: '2001:db8::1' }, 'SVC_RTC_ANNOUNCED_ADDRESS'],
    [{ SVC_RTC_PORT_MIN: '40000' }, 'SVC_RTC_PORT_MAX'],
    [{ SVC_RTC_PORT_MIN: '80', SVC_RTC_PORT_MAX: '90' }, 'SVC_RTC_PORT_MIN'],
    [{ SVC_RTC_PORT_MIN: '40000', SVC_RTC_PORT_MAX: '39999' }, 'SVC_RTC_PORT_MAX'],
    [{ SVC_RTC_PORT_MIN: '40000', SVC_RTC_PORT_MAX: '70000' }, 'SVC_RTC_PORT_MAX'],
    [{ SVC_ICE_TRANSPORT_POLICY: 'none' }, 'SVC_ICE_TRANSPORT_POLICY'],
    [{ SVC_ICE_TRANSPORT_POLICY: 'relay' }, 'SVC_ICE_TRANSPORT_POLICY'],
  ];
  for (const [env, setting] of bad) {
    // Through the server's own reader, as `npm start` meets it.
    const error = t.throws(() => loadConfigFromEnv({ SVC_ENCRYPTION_KEY: 'k'.repeat(32), SVC_SIGNING_SECRET: 's'.repeat(32), SVC_DATA_DIR: '/nonexistent', ...env }), undefined, JSON.stringify(env));
    t.true(error?.message.includes(setting), `${JSON.stringify(env)} -> ${error?.message}`);
    t.false(error?.message.includes('\n'), 'one line');
    t.is((error as { code?: string }).code, 'invalid_configuration');
  }
});

test("coturn's shared-secret credentials: username expiry:id, credential the base64 HMAC-SHA1 of it; fresh per peer, expiring with the room", (t) => {
  const turn = { secret: SECRET, urls: ['turn:198.51.100.5:3478'], ttlS: 600 };
  const c = mintTurnCredential(turn, 1_900_000_000, 'sub_1');
  t.is(c.username, '1900000000:sub_1');
  t.is(c.credential, createHmac('sha1', SECRET).update('1900000000:sub_1').digest('base64'));
  const network: RtcNetworkSettings = { ...RTC_NETWORK_DEFAULTS, turn };
  const now = 1_800_000_000_000;
  const [withEnd] = iceServersFor(network, now + 300_000, now, 'a');
  t.is(withEnd!.username, `${now / 1000 + 300 + 60}:a`, 'a room with an end: its end plus a minute of margin');
  const [withoutEnd] = iceServersFor(network, null, now, 'b');
  t.is(withoutEnd!.username, `${now / 1000 + 600}:b`, 'a room without one: the TTL');
  t.not(iceServersFor(network, null)[0]!.username, iceServersFor(network, null)[0]!.username, 'a fresh one each time');
  t.deepEqual(iceServerAddresses({ ...network, iceServers: [{ urls: ['stun:[2001:db8::5]:3478', 'stun:stun.example.com'] }] }).sort(), ['198.51.100.5', '2001:db8::5']);
});

test('the announced address replaces private IPv4 host candidates, in trickled candidates and in the offer, once per port', (t) => {
  const seen = new Set<string>();
  const host = 'candidate:1 1 udp 2122260223 172.20.5.2 40000 typ host generation 0 ufrag x network-id 1';
  t.is(announceCandidate(host, '198.51.100.21', seen), 'candidate:1 1 udp 2122260223 198.51.100.21 40000 typ host generation 0 ufrag x network-id 1');
  t.is(announceCandidate('candidate:2 1 udp 2122194687 10.0.0.2 40000 typ host generation 0', '198.51.100.21', seen), null, 'a second interface on the same port would announce the same address twice');
  const relay = 'candidate:3 1 udp 41885439 198.51.100.5 50000 typ relay raddr 172.20.5.2 rport 40000';
  t.is(announceCandidate(relay, '198.51.100.21', seen), relay, 'relay candidates are left alone');
  t.is(announceCandidate('candidate:4 1 udp 2122262783 2001:db8::2 40000 typ host', '198.51.100.21', seen), 'candidate:4 1 udp 2122262783 2001:db8::2 40000 typ host', 'IPv6 is not behind the IPv4 NAT');
  t.is(announceCandidate(host, null), host, 'nothing announced: unchanged');
  for (const local of ['127.0.0.1', '::1', '169.254.3.4', 'fe80::1']) {
    t.is(announceCandidate(`candidate:5 1 udp 2122260223 ${local} 40001 typ host generation 0`, '198.51.100.21', new Set()), null, `${local}: never reachable from elsewhere`);
  }
  const sdp = ['v=0', 'm=audio 9 UDP/TLS/RTP/SAVPF 111', `a=${host}`, 'a=candidate:9 1 udp 2122194687 10.0.0.2 40000 typ host', 'm=video 9 UDP/TLS/RTP/SAVPF 96', `a=${host}`, ''].join('\r\n');
  t.is(
    announceInSdp(sdp, '198.51.100.21'),
    ['v=0', 'm=audio 9 UDP/TLS/RTP/SAVPF 111', 'a=candidate:1 1 udp 2122260223 198.51.100.21 40000 typ host generation 0 ufrag x network-id 1', 'm=video 9 UDP/TLS/RTP/SAVPF 96', 'a=candidate:1 1 udp 2122260223 198.51.100.21 40000 typ host generation 0 ufrag x network-id 1', ''].join('\r\n'),
  );
});

/** A visitor on a signalling socket: every message kept; it answers offers with its own libwebrtc peer when asked to. */
async function visitor(server: RoomTestServer, token: string) {
  const ws = new WebSocket(server.signalUrl);
  const messages: SignallingServerMessage[] = [];
  ws.on('message', (data) => messages.push(JSON.parse(String(data)) as SignallingServerMessage));
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  const send = (m: unknown) => ws.send(JSON.stringify(m));
  send({ type: 'join', token });
  const joined = await until(() => messages.find((m): m is Extract<SignallingServerMessage, { type: 'joined' }> => m.type === 'joined'), { what: 'joined' });
  return { ws, messages, send, joined, close: () => ws.terminate() };
}

const offers = (messages: SignallingServerMessage[]) => messages.filter((m): m is Extract<SignallingServerMessage, { type: 'offer' }> => m.type === 'offer');
const ufragOf = (sdp: string) => /a=ice-ufrag:(\S+)/.exec(sdp)?.[1];

async function freeUdpPort(): Promise<number> {
  const socket = createSocket('udp4');
  await new Promise<void>((resolve) => socket.bind(0, '0.0.0.0', resolve));
  const { port } = socket.address();
  await new Promise<void>((resolve) => socket.close(() => resolve()));
  return port;
}

async function roomWith(t: import('ava').ExecutionContext, network: RtcNetworkSettings, iceAllowedRanges: string[] = []) {
  const rooms = new RoomRegistry({ network, iceAllowedRanges });
  const server = await startRoomServer(rooms);
  const created = rooms.createRoom({ mediaTtlMs: 120_000 });
  const published = await publishAvatar(NEVER, { provider: 'embedded', room: created.room, token: created.publisherToken }, { rooms });
  const events: RoomSubscriberEvent[] = [];
  const sub = rooms.get(created.room)!.subscriberEvents.subscribe((e) => events.push(e));
  t.teardown(async () => {
    sub.unsubscribe();
    await published.close();
    rooms.closeAll();
    await server.close();
  });
  return { rooms, server, created, events };
}

test('the visitor gets its TURN credential and the policy in `joined`; the server announces its address and binds inside the port range; a full range is an error for that visitor only', async (t) => {
  t.timeout(60_000);
  const withTurn = await roomWith(t, { ...RTC_NETWORK_DEFAULTS, turn: { secret: SECRET, urls: ['turn:198.51.100.5:3478?transport=udp'], ttlS: 600 } });
  const turnVisitor = await visitor(withTurn.server, withTurn.created.subscriberToken);
  t.teardown(() => turnVisitor.close());
  const [turn] = turnVisitor.joined.ice_servers;
  t.deepEqual(turn!.urls, ['turn:198.51.100.5:3478?transport=udp']);
  const [expiry, id] = String(turn!.username).split(':');
  t.is(id, turnVisitor.joined.participant_id, 'minted for this join');
  t.true(Math.abs(Number(expiry) - (Date.now() / 1000 + 120 + 60)) < 5, `expires with the room (+1 min): ${expiry}`);
  t.is(turn!.credential, createHmac('sha1', SECRET).update(String(turn!.username)).digest('base64'));
  t.is(turnVisitor.joined.ice_transport_policy, 'all');

  // Announced address and a one-port range (no TURN here: an unreachable TURN server holds the
  // end of gathering for its own timeout).
  const port = await freeUdpPort();
  const { server, created, rooms, events } = await roomWith(t, { ...RTC_NETWORK_DEFAULTS, announcedAddress: '203.0.113.7', portRange: { min: port, max: port } });
  const first = await visitor(server, created.subscriberToken);
  t.teardown(() => first.close());
  t.deepEqual(first.joined.ice_servers, [], 'nothing configured: no servers');
  // Every IPv4 host candidate names the announced address, every UDP one is on the range's only port.
  await until(() => first.messages.some((m) => m.type === 'candidate' && m.candidate === null), { timeoutMs: 30_000, what: 'the end of the server candidates' });
  const candidates = [
    ...first.messages.flatMap((m) => (m.type === 'candidate' && m.candidate ? [m.candidate.candidate] : [])),
    ...offers(first.messages).flatMap((o) => o.sdp.split(/\r?\n/).filter((l) => l.startsWith('a=candidate:')).map((l) => l.slice(2))),
  ];
  const udp = candidates.filter((c) => / udp /i.test(c));
  t.true(udp.length > 0, 'UDP candidates were offered');
  for (const c of udp) {
    const [, address, p] = / udp \d+ (\S+) (\d+) typ/i.exec(c)!;
    t.is(Number(p), port, c);
    if (!address!.includes(':')) t.is(address, '203.0.113.7', c);
  }

  // The range holds one port, and the first visitor's peer holds it: the second is told at once.
  const second = await visitor(server, rooms.issueToken(created.room, 'subscriber'));
  t.teardown(() => second.close());
  const error = await until(() => second.messages.find((m) => m.type === 'error'), { timeoutMs: 30_000, what: 'the error for the second visitor' });
  t.like(error, { type: 'error', code: 'ice_unavailable', fatal: false });
  t.regex((error as { message: string }).message, /SVC_RTC_PORT_MIN\.\.MAX/);
  t.truthy(
    events.find((e) => e.type === 'peer-state' && e.participantId === second.joined.participant_id && e.state === 'failed' && e.reason === 'media_ports_exhausted'),
    'the bot sees the failure with its reason',
  );
  t.false(events.some((e) => e.type === 'peer-state' && e.participantId === first.joined.participant_id && e.state === 'failed'), 'the first visitor is untouched');
});

test('an ICE restart asked by the visitor: a new offer on the same peer connection with fresh ICE credentials, answered, connected again', async (t) => {
  t.timeout(60_000);
  // Loopback opened: the visitor's host candidates are where the server's checks go.
  const { server, created, rooms } = await roomWith(t, RTC_NETWORK_DEFAULTS, ['127.0.0.0/8']);
  const v = await visitor(server, created.subscriberToken);
  t.teardown(() => v.close());
  const wrtc = wrtcWithSources();
  const pc = new wrtc.RTCPeerConnection({ iceServers: [] });
  t.teardown(() => pc.close());
  const offer = await until(() => offers(v.messages)[0], { what: 'the offer' });
  pc.onicecandidate = (e) => {
    if (e.candidate && / 127\.0\.0\.1 /.test(e.candidate.candidate)) v.send({ type: 'candidate', pc_id: offer.pc_id, candidate: { candidate: e.candidate.candidate, sdpMid: e.candidate.sdpMid, sdpMLineIndex: e.candidate.sdpMLineIndex } });
  };
  let applied = 0;
  const applyServerCandidates = async () => {
    const list = v.messages.filter((m) => m.type === 'candidate' && m.candidate);
    for (const m of list.slice(applied)) await pc.addIceCandidate((m as { candidate: RTCIceCandidateInit }).candidate).catch(() => undefined);
    applied = list.length;
  };
  const answer = async (sdp: string) => {
    await pc.setRemoteDescription({ type: 'offer', sdp });
    const created = await pc.createAnswer();
    await pc.setLocalDescription(created);
    // As created, its candidates trickled (never read back: see transports/webrtc/subscriber-peer.ts).
    v.send({ type: 'answer', pc_id: offer.pc_id, sdp: created.sdp });
  };
  await answer(offer.sdp);
  const serverState = () => rooms.get(created.room)!.subscribers()[0]!.peerState;
  await until(async () => (await applyServerCandidates(), pc.connectionState === 'connected' && serverState() === 'connected'), { timeoutMs: 30_000, what: 'both sides connected' });

  v.send({ type: 'restart_ice' });
  v.send({ type: 'restart_ice', pc_id: 'pc_not-mine' });
  await until(() => v.messages.filter((m) => m.type === 'error').length >= 2, { what: 'the two refusals' });
  t.deepEqual(
    v.messages.filter((m) => m.type === 'error').map((m) => (m as { code: string }).code),
    ['malformed_message', 'unknown_peer'],
  );

  v.send({ type: 'restart_ice', pc_id: offer.pc_id });
  const restart = await until(() => offers(v.messages)[1], { timeoutMs: 15_000, what: 'the restart offer' });
  t.is(restart.pc_id, offer.pc_id, 'the same peer connection: tracks and call go on');
  t.not(ufragOf(restart.sdp), ufragOf(offer.sdp), 'fresh ICE credentials');
  await answer(restart.sdp);
  await until(async () => (await applyServerCandidates(), pc.connectionState === 'connected' && serverState() === 'connected' && pc.iceConnectionState !== 'checking'), { timeoutMs: 30_000, what: 'connected after the restart' });
  t.is(ufragOf(pc.remoteDescription!.sdp), ufragOf(restart.sdp));
  t.is(offers(v.messages).length, 2, 'one restart, one offer');
  t.is(rooms.get(created.room)!.subscriberCount, 1, 'still one participant');
});
