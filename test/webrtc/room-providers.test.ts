/**
 * Room providers for sessions: the embedded one over RoomRegistry, and LiveKit's through
 * livekit-server-sdk against a local fake of LiveKit's server API (real Twirp JSON, real JWT
 * checks). Joining a LiveKit room is not tested (no LiveKit media server offline).
 */
import test from 'ava';
import { NEVER } from 'rxjs';
import { TokenVerifier } from 'livekit-server-sdk';
import { LiveKitRoomProvider } from '../../transports/livekit/index.ts';
import { EmbeddedRoomProvider, publishAvatar, RoomError, RoomRegistry } from '../../transports/webrtc/index.ts';
import { startLiveKitServerFake } from '../fakes/livekit-server.ts';

const KEY = 'APIfakekey';
const SECRET = 'fake-secret-that-is-long-enough-for-hs256-0123456789';

test('embedded: a room URL without the token, a subscriber token, and publish settings the bot can use', async (t) => {
  const rooms = new RoomRegistry();
  const provider = new EmbeddedRoomProvider(rooms, { signalUrl: 'wss://avatar.example.com/v1/rooms/signal' });
  const room = await provider.createRoom();
  t.is(room.roomUrl, `wss://avatar.example.com/v1/rooms/signal?room=${room.room}`);
  t.false(room.roomUrl.includes(room.subscriberToken));
  t.notThrows(() => rooms.authorize(room.room, room.subscriberToken, 'subscriber'));
  const published = await publishAvatar(NEVER, room.publisherSettings, { rooms });
  t.is(published.room, room.room);
  t.true(await provider.closeRoom(room.room));
  await published.ended; // the release stopped the avatar
  t.false(await provider.closeRoom(room.room));
});

test('livekit: creates the room through the API and mints tokens with the right grants', async (t) => {
  const api = await startLiveKitServerFake({ apiKey: KEY, apiSecret: SECRET });
  t.teardown(() => api.close());
  const provider = new LiveKitRoomProvider({ url: api.url, apiKey: KEY, apiSecret: SECRET, tokenTtlMs: 120_000 });
  const room = await provider.createRoom();
  t.deepEqual(api.createdRooms.get(room.room), { name: room.room, emptyTimeout: 60, maxParticipants: 4 });
  t.is(room.roomUrl, `${api.url}/?room=${room.room}`, 'the server, naming the room (the spec takes the room to release from the room_url)');
  t.like(room.publisherSettings, { provider: 'livekit', url: api.url }, 'the bot joins the server itself');
  const verifier = new TokenVerifier(KEY, SECRET);
  const avatar = await verifier.verify(room.publisherSettings.token);
  t.is(avatar.sub, `avatar-${room.room}`);
  t.like(avatar.video, { roomJoin: true, room: room.room, canPublish: true, canSubscribe: true });
  t.deepEqual(avatar.video?.canPublishSources, ['camera', 'microphone']);
  const user = await verifier.verify(room.subscriberToken);
  t.regex(user.sub ?? '', /^user-/);
  t.like(user.video, { roomJoin: true, room: room.room, canSubscribe: true });
  t.deepEqual(user.video?.canPublishSources, ['microphone']);
  t.true(user.exp! - user.nbf! <= 120);
  await t.throwsAsync(new TokenVerifier(KEY, 'another-secret-0123456789-0123456789-abcdef').verify(room.subscriberToken));
  t.true(await provider.closeRoom(room.room));
  t.false(await provider.closeRoom(room.room));
  t.deepEqual(api.roomApiRequests, ['CreateRoom', 'DeleteRoom', 'DeleteRoom']);
});

test('livekit: a refused or unreachable API is room_creation_failed', async (t) => {
  const api = await startLiveKitServerFake({ apiKey: KEY, apiSecret: SECRET });
  t.teardown(() => api.close());
  const wrongSecret = new LiveKitRoomProvider({ url: api.url, apiKey: KEY, apiSecret: 'not-the-secret-0123456789-0123456789-abcdef' });
  const refused = await t.throwsAsync(wrongSecret.createRoom(), { instanceOf: RoomError });
  t.is(refused!.code, 'room_creation_failed');
  t.regex(refused!.message, /invalid token/);
  t.is(api.createdRooms.size, 0);
  const unreachable = new LiveKitRoomProvider({ url: 'ws://127.0.0.1:1', apiKey: KEY, apiSecret: SECRET });
  const down = await t.throwsAsync(unreachable.createRoom(), { instanceOf: RoomError });
  t.is(down!.code, 'room_creation_failed');
  t.throws(() => new LiveKitRoomProvider({ url: 'https://x', apiKey: KEY, apiSecret: SECRET }), { instanceOf: RoomError });
});
