/**
 * The signalling WebSocket against real sockets: authentication (first message or header, never
 * the URL), typed errors for every client mistake, limits, and isolation between connections.
 * The media path itself is proven with a browser in browser-room.test.ts.
 */
import test from 'ava';
import { NEVER } from 'rxjs';
import { WebSocket } from 'ws';
import { publishAvatar, RoomRegistry, SIGNALLING_LIMITS, type SignallingServerMessage } from '../../transports/webrtc/index.ts';
import { ROOM_JOIN_LIMITS } from '../../transports/webrtc/room.ts';
import { startRoomServer, type RoomTestServer } from './browser.ts';
import { until } from '../../testing/until.ts';

let server: RoomTestServer;
const rooms = new RoomRegistry({ maxSubscribersPerRoom: 2 });

test.before(async () => {
  server = await startRoomServer(rooms, { joinTimeoutMs: 300, heartbeatIntervalMs: 150 });
});
test.after.always(async () => {
  rooms.closeAll();
  await server?.close();
});

interface Client {
  readonly ws: WebSocket;
  readonly messages: SignallingServerMessage[];
  readonly closed: Promise<{ code: number; reason: string }>;
  send(message: unknown): void;
  next(type: SignallingServerMessage['type']): Promise<SignallingServerMessage>;
}

async function connect(query = '', headers: Record<string, string> = {}, autoPong = true): Promise<Client> {
  const ws = new WebSocket(server.signalUrl + query, { headers, autoPong });
  const messages: SignallingServerMessage[] = [];
  const waiters: { type: string; resolve: (m: SignallingServerMessage) => void }[] = [];
  ws.on('message', (data) => {
    const m = JSON.parse(String(data)) as SignallingServerMessage;
    messages.push(m);
    for (const w of waiters.filter((w) => w.type === m.type)) {
      waiters.splice(waiters.indexOf(w), 1);
      w.resolve(m);
    }
  });
  const closed = new Promise<{ code: number; reason: string }>((resolve) => ws.on('close', (code, reason) => resolve({ code, reason: String(reason) })));
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  return {
    ws,
    messages,
    closed,
    send: (m) => ws.send(typeof m === 'string' || Buffer.isBuffer(m) ? m : JSON.stringify(m)),
    next: (type) => {
      const seen = messages.find((m) => m.type === type && !(m as { consumed?: boolean }).consumed);
      if (seen) {
        (seen as { consumed?: boolean }).consumed = true;
        return Promise.resolve(seen);
      }
      return new Promise((resolve) => waiters.push({ type, resolve: (m) => ((m as { consumed?: boolean }).consumed = true, resolve(m)) }));
    },
  };
}

test('join with the token in the first message; the room name may be in the URL', async (t) => {
  const created = rooms.createRoom();
  const client = await connect(`?room=${created.room}`);
  client.send({ type: 'join', token: created.subscriberToken });
  const joined = await client.next('joined');
  t.like(joined, { type: 'joined', room: created.room, publisher: null, protocol_version: 1 });
  t.is(rooms.get(created.room)!.subscriberCount, 1);
  client.ws.close();
  await client.closed;
  // The server sees the close in its own time (a loaded machine ran a 50 ms sleep's timer first).
  await until(() => rooms.get(created.room)!.subscriberCount === 0, { timeoutMs: 5_000, what: 'a closed socket to leave the room' });
  t.is(rooms.get(created.room)!.subscriberCount, 0, 'a closed socket leaves the room');
});

test('non-browser clients may send the token as a Bearer header', async (t) => {
  const created = rooms.createRoom();
  const client = await connect(`?room=${created.room}`, { Authorization: `Bearer ${created.subscriberToken}` });
  t.like(await client.next('joined'), { room: created.room });
  client.ws.close();
});

test('a token in the URL is refused even when valid', async (t) => {
  const created = rooms.createRoom();
  const client = await connect(`?room=${created.room}&token=${created.subscriberToken}`);
  t.like(await client.next('error'), { code: 'auth_failed', fatal: true });
  t.is((await client.closed).code, 4401);
  t.is(rooms.get(created.room)!.subscriberCount, 0);
});

test('wrong token, wrong room and publisher token are all auth_failed (4401)', async (t) => {
  const created = rooms.createRoom();
  for (const join of [
    { type: 'join', room: created.room, token: 'rt_wrong' },
    { type: 'join', room: 'room_other', token: created.subscriberToken },
    { type: 'join', room: created.room, token: created.publisherToken },
  ]) {
    const client = await connect();
    client.send(join);
    t.like(await client.next('error'), { code: 'auth_failed', fatal: true });
    t.is((await client.closed).code, 4401);
  }
  const mismatch = await connect(`?room=${created.room}`);
  mismatch.send({ type: 'join', room: 'room_else', token: created.subscriberToken });
  t.like(await mismatch.next('error'), { code: 'auth_failed' });
});

/** Keeps this process (the server and its clients) from running anything else for `ms`: a loaded machine's stall. */
function stall(ms: number): void {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    // busy
  }
}

// Serial: the stall holds every test of the process, and ava runs serial tests before the others.
test.serial('a join that came while the event loop was stalled past its deadline is read before the deadline is judged', async (t) => {
  const created = rooms.createRoom();
  const client = await connect();
  client.send({ type: 'join', token: created.subscriberToken });
  stall(500); // past the 300 ms join deadline, the join already in the server's socket
  const first = await Promise.race([client.next('joined'), client.next('error')]);
  t.like(first, { type: 'joined', room: created.room });
  client.ws.close();
});

test.serial('a pong that came while the event loop was stalled past the next heartbeat keeps the connection', async (t) => {
  const created = rooms.createRoom();
  const client = await connect();
  client.send({ type: 'join', token: created.subscriberToken });
  await client.next('joined');
  // The server pings every 150 ms; this client answers each ping as it reads it.
  await new Promise<void>((resolve) => client.ws.once('ping', () => resolve()));
  stall(400); // the pong is in the server's socket, and the next heartbeat is due
  await new Promise((resolve) => setTimeout(resolve, 450)); // three more heartbeats, answered in time
  client.send({ type: 'ping', t: 7 });
  t.like(await Promise.race([client.next('pong'), client.closed.then((c) => ({ type: 'closed', ...c }))]), { type: 'pong', t: 7 });
  t.is(client.ws.readyState, WebSocket.OPEN);
  client.ws.close();
});

test('no join in time closes with join_timeout; ping before joining is answered', async (t) => {
  const client = await connect();
  client.send({ type: 'ping', t: 42 });
  t.like(await client.next('pong'), { t: 42 });
  t.like(await client.next('error'), { code: 'join_timeout', fatal: true });
  t.is((await client.closed).code, 4408);
});

test('client mistakes get typed non-fatal errors and the connection keeps working', async (t) => {
  const created = rooms.createRoom();
  const client = await connect();
  client.send({ type: 'answer', pc_id: 'pc_x', sdp: 'v=0' });
  t.like(await client.next('error'), { code: 'not_joined', fatal: false });
  client.send({ type: 'join', token: created.subscriberToken });
  await client.next('joined');
  const mistakes: [unknown, string][] = [
    ['not json', 'malformed_message'],
    ['[1,2]', 'malformed_message'],
    [{ type: 42 }, 'malformed_message'],
    [{ type: 'answer', pc_id: 'pc_x' }, 'malformed_message'],
    [{ type: 'candidate', pc_id: 'pc_x', candidate: { candidate: 'c', sdpMLineIndex: -1 } }, 'malformed_message'],
    [{ type: 'candidate', pc_id: 'pc_x' }, 'malformed_message'],
    [Buffer.from([1, 2, 3]), 'malformed_message'],
    [{ type: 'join', token: created.subscriberToken }, 'already_joined'],
    [{ type: 'answer', pc_id: 'pc_x', sdp: 'v=0' }, 'unknown_peer'],
    [JSON.stringify({ type: 'ping', pad: 'x'.repeat(SIGNALLING_LIMITS.maxMessageBytes) }), 'message_too_large'],
  ];
  for (const [message, code] of mistakes) {
    client.send(message);
    t.like(await client.next('error'), { code, fatal: false }, `for ${String(message).slice(0, 40)}`);
  }
  client.send({ type: 'ping', t: 1 });
  t.like(await client.next('pong'), { t: 1 });
  t.is(client.ws.readyState, WebSocket.OPEN);
  client.ws.close();
});

test('a message over the hard limit is closed by the socket layer (1009); others are unaffected', async (t) => {
  const created = rooms.createRoom();
  const bystander = await connect();
  bystander.send({ type: 'join', token: created.subscriberToken });
  await bystander.next('joined');
  const abuser = await connect();
  abuser.send('x'.repeat(SIGNALLING_LIMITS.hardMaxPayloadBytes + 1));
  t.is((await abuser.closed).code, 1009);
  bystander.send({ type: 'ping', t: 5 });
  t.like(await bystander.next('pong'), { t: 5 });
  bystander.ws.close();
});

test('floods are rate limited, not fatal', async (t) => {
  const client = await connect();
  for (let i = 0; i < SIGNALLING_LIMITS.maxMessagesPerSecond + 10; i++) client.send({ type: 'ping', t: i });
  t.like(await client.next('error'), { code: 'rate_limited', fatal: false });
  t.is(client.ws.readyState, WebSocket.OPEN);
  client.ws.close();
});

test('a flood gets one rate_limited reply per second, not one per dropped message', async (t) => {
  const created = rooms.createRoom();
  const client = await connect();
  client.send({ type: 'join', token: created.subscriberToken });
  await client.next('joined'); // joined: the 300 ms join timeout of this file does not apply
  const flood = 300;
  for (let i = 0; i < flood; i++) client.send({ type: 'ping', t: i });
  // Every message is judged on arrival, in order: once a sentinel is answered, the flood was judged.
  const sentinel = 1_000_000;
  await until(() => {
    if (client.messages.some((m) => m.type === 'pong' && m.t >= sentinel)) return true;
    client.send({ type: 'ping', t: sentinel });
    return false;
  }, { intervalMs: 100, what: 'a ping answered after the flood' });
  const errors = client.messages.filter((m) => m.type === 'error');
  t.is(errors.length, 1, `${errors.length} error replies to ${flood - SIGNALLING_LIMITS.maxMessagesPerSecond} dropped messages`);
  t.like(errors[0], { code: 'rate_limited', fatal: false });
  // The join may share the flood's one-second window.
  const answered = client.messages.filter((m) => m.type === 'pong' && m.t < flood).length;
  t.true(answered >= SIGNALLING_LIMITS.maxMessagesPerSecond - 1 && answered <= SIGNALLING_LIMITS.maxMessagesPerSecond, `${answered} pings answered`);
  client.ws.close();
});

test('a full room refuses more subscribers; the same token joining again replaces the old connection', async (t) => {
  const created = rooms.createRoom();
  const second = rooms.issueToken(created.room, 'subscriber');
  const third = rooms.issueToken(created.room, 'subscriber');
  const a = await connect();
  a.send({ type: 'join', token: created.subscriberToken });
  await a.next('joined');
  const b = await connect();
  b.send({ type: 'join', token: second });
  await b.next('joined');
  const c = await connect();
  c.send({ type: 'join', token: third });
  t.like(await c.next('error'), { code: 'room_full', fatal: true });
  t.is((await c.closed).code, 4429);
  const again = await connect();
  again.send({ type: 'join', token: created.subscriberToken });
  await again.next('joined');
  t.like(await a.next('error'), { code: 'replaced', fatal: true });
  t.is((await a.closed).code, 4409);
  t.is(rooms.get(created.room)!.subscriberCount, 2);
  b.ws.close();
  again.ws.close();
});

test('one token rejoining in a loop is refused past its join budget (rate_limited, fatal, 4429); another token of the room still joins', async (t) => {
  const created = rooms.createRoom();
  const other = rooms.issueToken(created.room, 'subscriber');
  const clients = [];
  // ROOM_JOIN_LIMITS: 5 at once (each replaces the one before), then one every 2 s.
  for (let i = 0; i < ROOM_JOIN_LIMITS.burst; i++) {
    const c = await connect();
    c.send({ type: 'join', token: created.subscriberToken });
    await c.next('joined');
    clients.push(c);
  }
  const refused = await connect();
  refused.send({ type: 'join', token: created.subscriberToken });
  const error = await refused.next('error');
  t.like(error, { code: 'rate_limited', fatal: true });
  t.regex((error as { message: string }).message, /joined the room 5 times in quick succession; join again in [12] s/);
  t.is((await refused.closed).code, 4429);
  t.is(rooms.get(created.room)!.subscriberCount, 1, 'the last admitted connection stays');
  const b = await connect();
  b.send({ type: 'join', token: other });
  await b.next('joined');
  t.is(rooms.get(created.room)!.subscriberCount, 2);
  for (const c of [...clients, b]) c.ws.close();
});

test('closing the room tells its participants and closes their sockets (4410)', async (t) => {
  const created = rooms.createRoom();
  const client = await connect();
  client.send({ type: 'join', token: created.subscriberToken });
  await client.next('joined');
  t.true(rooms.closeRoom(created.room, 'session released'));
  t.like(await client.next('closed'), { reason: 'session released' });
  t.is((await client.closed).code, 4410);
});

test('with a publisher, a joined client gets an offer and candidates; bad SDP and candidates are typed errors, not crashes', async (t) => {
  const created = rooms.createRoom();
  const published = await publishAvatar(NEVER, { provider: 'embedded', room: created.room, token: created.publisherToken }, { rooms });
  const client = await connect();
  client.send({ type: 'join', token: created.subscriberToken });
  const joined = await client.next('joined');
  t.like(joined, { publisher: { participant_id: published.participantId } });
  const offer = (await client.next('offer')) as Extract<SignallingServerMessage, { type: 'offer' }>;
  t.is(offer.publisher_id, published.participantId);
  t.regex(offer.sdp, /m=video/);
  t.regex(offer.sdp, /m=audio/);
  const candidate = (await client.next('candidate')) as Extract<SignallingServerMessage, { type: 'candidate' }>;
  t.is(candidate.pc_id, offer.pc_id);
  t.regex(candidate.candidate?.candidate ?? 'end', /typ host|end/);
  // The offer goes out as created and every candidate of its peer after it (a client drops
  // candidates for an offer it has not seen): none in the SDP, none before it.
  const ofPeer = client.messages.filter((m) => (m.type === 'offer' || m.type === 'candidate') && m.pc_id === offer.pc_id);
  t.is(ofPeer[0]?.type, 'offer');
  t.notRegex(offer.sdp, /^a=candidate:/m);
  client.send({ type: 'candidate', pc_id: offer.pc_id, candidate: { candidate: 'candidate:garbage', sdpMid: '0', sdpMLineIndex: 0 } });
  client.send({ type: 'answer', pc_id: offer.pc_id, sdp: 'v=0\r\nthis is not sdp\r\n' });
  t.like(await client.next('error'), { code: 'negotiation_failed', fatal: false });
  client.send({ type: 'candidate', pc_id: offer.pc_id, candidate: { candidate: 'candidate:1 1 udp 1 999.1.1.1 0 typ host', sdpMid: '0', sdpMLineIndex: 0 } });
  client.send({ type: 'ping', t: 9 });
  t.like(await client.next('pong'), { t: 9 });
  await published.close();
  t.like(await client.next('unpublished'), { pc_id: offer.pc_id, publisher_id: published.participantId });
  client.send({ type: 'answer', pc_id: offer.pc_id, sdp: 'v=0' });
  t.like(await client.next('error'), { code: 'unknown_peer', fatal: false });
  client.ws.close();
});

test('a connection that stops answering pings is dropped and leaves its room', async (t) => {
  const created = rooms.createRoom();
  const alive = await connect();
  alive.send({ type: 'join', token: rooms.issueToken(created.room, 'subscriber') });
  await alive.next('joined');
  const silent = await connect('', {}, false);
  silent.send({ type: 'join', token: created.subscriberToken });
  await silent.next('joined');
  t.is(rooms.get(created.room)!.subscriberCount, 2);
  t.is((await silent.closed).code, 1006, 'terminated, not closed politely');
  t.is(rooms.get(created.room)!.subscriberCount, 1);
  await new Promise((resolve) => setTimeout(resolve, 400)); // several heartbeats
  t.is(alive.ws.readyState, WebSocket.OPEN, 'a client that answers pings stays');
  alive.ws.close();
});
