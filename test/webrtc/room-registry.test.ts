/** Room tokens: one role per token, bound to one room, short-lived for joining, revoked with the room. */
import test from 'ava';
import { VirtualClock } from '../../core/clock.ts';
import { RoomError, RoomRegistry, SignallingError } from '../../transports/webrtc/index.ts';
import { ROOM_JOIN_LIMITS } from '../../transports/webrtc/room.ts';

const refused = { instanceOf: RoomError, message: /not valid/ };

test('a created room admits its publisher and subscriber tokens in their own roles only', (t) => {
  const rooms = new RoomRegistry();
  const created = rooms.createRoom();
  t.regex(created.room, /^room_[0-9a-f]{32}$/);
  t.not(created.publisherToken, created.subscriberToken);
  t.is(rooms.authorize(created.room, created.subscriberToken, 'subscriber').room.name, created.room);
  t.is(rooms.authorize(undefined, created.publisherToken, 'publisher').grant.role, 'publisher');
  t.throws(() => rooms.authorize(created.room, created.publisherToken, 'subscriber'), refused);
  t.throws(() => rooms.authorize(created.room, created.subscriberToken, 'publisher'), refused);
  t.throws(() => rooms.authorize(created.room, 'rt_guess', 'subscriber'), refused);
  const other = rooms.createRoom();
  t.throws(() => rooms.authorize(other.room, created.subscriberToken, 'subscriber'), refused);
});

test('tokens stop admitting after their lifetime; issueToken makes fresh ones', async (t) => {
  const clock = new VirtualClock();
  const rooms = new RoomRegistry({ clock, tokenTtlMs: 60_000 });
  const created = rooms.createRoom();
  t.is(created.expiresAtMs, clock.now() + 60_000);
  await clock.advance(59_999);
  t.notThrows(() => rooms.authorize(created.room, created.subscriberToken, 'subscriber'));
  await clock.advance(1);
  t.throws(() => rooms.authorize(created.room, created.subscriberToken, 'subscriber'), refused);
  const fresh = rooms.issueToken(created.room, 'subscriber', 5_000);
  t.notThrows(() => rooms.authorize(created.room, fresh, 'subscriber'));
});

test('closing a room revokes its tokens and reports whether it was open', (t) => {
  const rooms = new RoomRegistry();
  const created = rooms.createRoom();
  t.true(rooms.closeRoom(created.room));
  t.false(rooms.closeRoom(created.room));
  t.false(rooms.closeRoom('room_unknown'));
  t.throws(() => rooms.authorize(created.room, created.subscriberToken, 'subscriber'), refused);
  t.throws(() => rooms.issueToken(created.room, 'subscriber'), { instanceOf: RoomError, message: /not open/ });
  t.is(rooms.size, 0);
});

test('room names are checked and unique; the room count is bounded', (t) => {
  const rooms = new RoomRegistry({ maxRooms: 2 });
  t.is(rooms.createRoom({ name: 'demo-1' }).room, 'demo-1');
  t.throws(() => rooms.createRoom({ name: 'demo-1' }), { instanceOf: RoomError, message: /already exists/ });
  t.throws(() => rooms.createRoom({ name: 'bad name/../x' }), { instanceOf: RoomError, message: /room names/ });
  rooms.createRoom();
  t.throws(() => rooms.createRoom(), { instanceOf: RoomError, message: /2 rooms open/ });
});

test('rooms left empty past the timeout are closed by the next sweep; rooms in use are kept', async (t) => {
  const clock = new VirtualClock();
  const rooms = new RoomRegistry({ clock, emptyRoomTimeoutMs: 60_000, tokenTtlMs: 600_000 });
  const unused = rooms.createRoom();
  const used = rooms.createRoom();
  const channel = { send: () => undefined, close: () => undefined };
  const participant = rooms.get(used.room)!.join('grant-1', channel);
  t.is(rooms.get(used.room)!.emptySinceMs, null);
  await clock.advance(59_999);
  t.deepEqual(rooms.sweep(), []);
  await clock.advance(1);
  t.deepEqual(rooms.sweep(), [unused.room]);
  t.is(rooms.get(unused.room), undefined);
  t.throws(() => rooms.authorize(unused.room, unused.subscriberToken, 'subscriber'), refused);
  participant.leave();
  t.is(rooms.get(used.room)!.emptySinceMs, clock.now());
  await clock.advance(60_000);
  rooms.createRoom(); // creating a room sweeps too
  t.is(rooms.get(used.room), undefined);
  t.is(rooms.size, 1);
});

test('a publication that cannot give a visitor its media: the visitor is told and stays a member that can leave; neither join nor publish throws', (t) => {
  const rooms = new RoomRegistry();
  const room = rooms.get(rooms.createRoom().room)!;
  const channel = () => {
    const sent: Array<Record<string, unknown>> = [];
    return { sent, send: (m: object) => void sent.push(m as Record<string, unknown>), close: () => undefined };
  };
  // The publisher's sources closed under it: making a visitor's tracks throws.
  const publication = { participantId: 'bot', tracks: [], createTracks: (): MediaStreamTrack[] => { throw new Error('the sources are closed'); }, onRoomClosed: () => undefined };
  const early = channel();
  const first = room.join('grant-1', early);
  t.notThrows(() => room.publish(publication), 'publish, with a member there');
  t.like(early.sent.find((m) => m.type === 'error'), { code: 'internal_error', fatal: false });
  t.regex(String(early.sent.find((m) => m.type === 'error')?.message), /the sources are closed/);
  const late = channel();
  let second: ReturnType<typeof room.join> | undefined;
  t.notThrows(() => void (second = room.join('grant-2', late)), 'join, with the publication there');
  t.like(late.sent.find((m) => m.type === 'error'), { code: 'internal_error', fatal: false });
  t.is(room.subscriberCount, 2);
  first.leave();
  second?.leave();
  t.is(room.subscriberCount, 0, 'both members could leave');
  room.unpublish(publication);
  t.is(room.publisherId, null);
});

test('a token\'s joins are budgeted: 5 at once, then one every 2 s; other tokens have their own budget', async (t) => {
  const clock = new VirtualClock();
  const rooms = new RoomRegistry({ clock });
  const room = rooms.get(rooms.createRoom().room)!;
  const channel = () => ({ send: () => undefined, close: () => undefined });
  t.deepEqual(ROOM_JOIN_LIMITS, { burst: 5, refillMs: 2_000 });
  for (let i = 0; i < 5; i++) room.join('grant-1', channel());
  const refused = t.throws(() => room.join('grant-1', channel()), { instanceOf: SignallingError });
  t.is(refused!.code, 'rate_limited');
  t.true(refused!.fatal);
  t.regex(refused!.message, /join again in 2 s/);
  t.notThrows(() => room.join('grant-2', channel()), 'another token');
  await clock.advance(1_000);
  t.throws(() => room.join('grant-1', channel()), { message: /join again in 1 s/ }, 'half a join refilled');
  await clock.advance(1_000);
  t.notThrows(() => room.join('grant-1', channel()), 'a join refilled after 2 s');
  t.throws(() => room.join('grant-1', channel()), { message: /rate_limited|join again/ });
  await clock.advance(60_000);
  for (let i = 0; i < 5; i++) t.notThrows(() => room.join('grant-1', channel()), 'the budget refills to 5, not more');
  t.throws(() => room.join('grant-1', channel()));
  t.is(room.subscriberCount, 2, 'one member per token');
});
