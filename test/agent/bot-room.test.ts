/**
 * openBotRoom (agent/bot-room.ts): the bot runner's one view of a session's room. The embedded
 * adapter is the registry's room itself (same presence, messages and audio input); the refusals
 * are clear errors, never a crash: no registry, a room that is not open, settings that disagree
 * with the provider, and a LiveKit url the address policy refuses (the same neutral
 * `publish_failed` as any LiveKit publishing, with nothing reaching the network).
 */
import test from 'ava';
import { dispose } from '@livekit/rtc-node';
import { openBotRoom } from '../../agent/bot-room.ts';
import { LIVEKIT_JOIN_FAILED } from '../../transports/livekit/index.ts';
import { RoomAudioInput, RoomRegistry, type AvatarRoom, type RoomSubscriberEvent } from '../../transports/webrtc/index.ts';

test.after.always(async () => {
  await dispose(); // the LiveKit FFI runtime, loaded by the LiveKit case
});

function embeddedRoom(room: string, token = 'publisher-token'): AvatarRoom {
  return { provider: 'embedded', room, roomUrl: `ws://127.0.0.1/v1/rooms/signal?room=${room}`, subscriberToken: 'sub', publisherSettings: { provider: 'embedded', room, token }, expiresAtMs: Date.now() + 60_000 };
}

test('the embedded adapter is the registry room: its presence, its visitors, an audio input on it, closed with it', async (t) => {
  const rooms = new RoomRegistry();
  t.teardown(() => rooms.closeAll());
  const created = rooms.createRoom();
  const bot = await openBotRoom(embeddedRoom(created.room, created.publisherToken), { rooms });
  t.is(bot.provider, 'embedded');
  t.is(bot.name, created.room);
  t.true(bot.createAudioInput() instanceof RoomAudioInput);
  const events: RoomSubscriberEvent[] = [];
  bot.presence.subscribe((e) => events.push(e));
  const room = rooms.get(created.room)!;
  const member = room.join('grant-1', { send: () => undefined, close: () => undefined });
  t.deepEqual(events, [{ type: 'joined', participantId: member.participantId }]);
  t.deepEqual(bot.visitors(), [{ participantId: member.participantId, peerState: 'none' }]);
  t.false(bot.closed);
  await bot.leave(); // nothing: the room is the server's
  t.false(room.closed);
  rooms.closeRoom(created.room, 'released');
  t.true(bot.closed);
});

test('refusals are clear errors', async (t) => {
  const rooms = new RoomRegistry();
  t.teardown(() => rooms.closeAll());
  await t.throwsAsync(openBotRoom(embeddedRoom('room-x'), {}), { message: 'this bot runner has no embedded room registry' });
  await t.throwsAsync(openBotRoom(embeddedRoom('room-missing'), { rooms }), { message: 'room room-missing is not open' });
  const mixed: AvatarRoom = { ...embeddedRoom('room-y'), provider: 'livekit' };
  await t.throwsAsync(openBotRoom(mixed, { rooms }), { message: /disagree/ });
});

test('a LiveKit url on a private address is refused by the address policy with the neutral join failure', async (t) => {
  const room: AvatarRoom = { provider: 'livekit', room: 'room-lk', roomUrl: 'ws://127.0.0.1:9', subscriberToken: 'sub', publisherSettings: { provider: 'livekit', url: 'ws://127.0.0.1:9', token: 'token' }, expiresAtMs: Date.now() + 60_000 };
  const error = await t.throwsAsync(openBotRoom(room, {}));
  t.is(error?.message, LIVEKIT_JOIN_FAILED);
  t.is((error as { code?: string }).code, 'publish_failed');
});
