/** Publishing into embedded rooms: token checks, one publisher per room, and how publishing ends. */
import test from 'ava';
import { NEVER, Subject } from 'rxjs';
import { publishAvatar, RoomError, RoomRegistry } from '../../transports/webrtc/index.ts';
import type { FaceFrame } from '../../processors/avatar/face-model.ts';
import { until } from '../../testing/until.ts';
import { syntheticFaceFrames } from './synthetic-face.ts';

test('the publisher needs the room publisher token', async (t) => {
  const rooms = new RoomRegistry();
  const created = rooms.createRoom();
  for (const token of ['rt_wrong', created.subscriberToken]) {
    const error = await t.throwsAsync(publishAvatar(NEVER, { provider: 'embedded', room: created.room, token }, { rooms }), { instanceOf: RoomError });
    t.is(error!.code, 'auth_failed');
  }
  t.is(rooms.get(created.room)!.publisherId, null);
});

test('a room holds one publisher at a time; after it ends another may publish', async (t) => {
  const rooms = new RoomRegistry();
  const created = rooms.createRoom();
  const settings = { provider: 'embedded' as const, room: created.room, token: created.publisherToken };
  const first = await publishAvatar(NEVER, settings, { rooms });
  t.regex(first.participantId, /^pub_/);
  t.is(rooms.get(created.room)!.publisherId, first.participantId);
  const error = await t.throwsAsync(publishAvatar(NEVER, settings, { rooms }), { instanceOf: RoomError });
  t.is(error!.code, 'already_publishing');
  await first.close();
  await first.close(); // idempotent
  t.is(rooms.get(created.room)!.publisherId, null);
  const second = await publishAvatar(NEVER, settings, { rooms });
  t.is(rooms.get(created.room)!.publisherId, second.participantId);
  await second.close();
});

test('publishing ends by itself when the frames complete or the room closes', async (t) => {
  const rooms = new RoomRegistry();
  const a = rooms.createRoom();
  const frames = new Subject<FaceFrame>();
  const finite = await publishAvatar(frames, { provider: 'embedded', room: a.room, token: a.publisherToken }, { rooms });
  frames.complete();
  await finite.ended;
  t.is(rooms.get(a.room)!.publisherId, null);

  const b = rooms.createRoom();
  const live = await publishAvatar(await syntheticFaceFrames(), { provider: 'embedded', room: b.room, token: b.publisherToken }, { rooms });
  // Publishing has started once a frame was taken (polled: a fixed wait may hold none on a loaded machine).
  await until(() => live.stats.frames > 0, { timeoutMs: 15_000, intervalMs: 20, what: 'the first frame taken' });
  rooms.closeRoom(b.room, 'session released');
  await live.ended;
  const framesAtEnd = live.stats.frames;
  await new Promise((resolve) => setTimeout(resolve, 120));
  t.is(live.stats.frames, framesAtEnd, 'no frames are taken after the room closed');
});

test("a publisher's messages still reach the room after its frames ran out, until another publishes or the room closes", async (t) => {
  // A bot's farewell ends its frames, and its session-ended goes out after (bot-session.ts): the
  // visitor must get it whichever comes first (CI saw it lost when the frames ended first).
  const rooms = new RoomRegistry();
  const created = rooms.createRoom();
  const room = rooms.get(created.room)!;
  const sent: Array<Record<string, unknown>> = [];
  room.join('grant-visitor', { send: (m) => void sent.push(m as unknown as Record<string, unknown>), close: () => undefined });
  const settings = { provider: 'embedded' as const, room: created.room, token: created.publisherToken };
  const frames = new Subject<FaceFrame>();
  const first = await publishAvatar(frames, settings, { rooms });
  frames.complete();
  await first.ended;
  t.is(room.publisherId, null, 'the media ended');
  t.is(first.sendMessage!({ type: 'session-ended', reason: 'agent_ended' }), 1);
  const appMessages = () => sent.filter((m) => m.type === 'app_message').map((m) => m.message);
  t.deepEqual(appMessages(), [{ type: 'session-ended', reason: 'agent_ended' }]);
  t.is(sent.findIndex((m) => m.type === 'unpublished') < sent.findIndex((m) => m.type === 'app_message'), true);

  const second = await publishAvatar(NEVER, settings, { rooms });
  t.is(first.sendMessage!({ type: 'bot-state', state: 'listening' }), 0, 'the earlier publisher is not the room any more');
  t.is(second.sendMessage!({ type: 'bot-ready' }), 1);
  rooms.closeRoom(created.room, 'session released');
  t.is(second.sendMessage!({ type: 'bot-state', state: 'ended' }), 0, 'nothing after the room closed');
  t.deepEqual(appMessages(), [{ type: 'session-ended', reason: 'agent_ended' }, { type: 'bot-ready' }]);
  await second.close();

  // Closed by its owner, a publication sends nothing more (browser-messages tests it at a page).
  const other = rooms.createRoom();
  const third = await publishAvatar(NEVER, { provider: 'embedded', room: other.room, token: other.publisherToken }, { rooms });
  await third.close();
  t.is(third.sendMessage!({ type: 'bot-ready' }), 0);
});
