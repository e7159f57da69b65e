/**
 * Client -> bot messages (`client_message`) and subscriber presence on embedded rooms: the
 * signalling parser's checks, delivery to `Room.clientMessages` tagged with the sender, and the
 * join / leave events a bot runner keeps presence with. Driven through the Room API with the same
 * parsed messages the signalling socket hands it (the socket path is covered in
 * test/agent/bot-runner.test.ts).
 */
import test from 'ava';
import {
  parseSignallingMessage, RoomRegistry, SignallingError, SIGNALLING_LIMITS,
  type RoomClientMessage, type RoomSubscriberEvent, type SignallingServerMessage,
} from '../../transports/webrtc/index.ts';
import { SESSION_MESSAGE_LIMITS } from '../../protocol/session-messages.ts';

test('client_message carries one JSON object within the session protocol limit', (t) => {
  t.deepEqual(parseSignallingMessage(JSON.stringify({ type: 'client_message', message: { type: 'hang-up' } })), { type: 'client_message', message: { type: 'hang-up' } });
  for (const message of [undefined, null, 'hang-up', 42, ['hang-up']]) {
    const error = t.throws(() => parseSignallingMessage(JSON.stringify({ type: 'client_message', message })), { instanceOf: SignallingError });
    t.is(error!.code, 'malformed_message');
    t.false(error!.fatal);
  }
  t.is(SIGNALLING_LIMITS.maxClientMessageBytes, SESSION_MESSAGE_LIMITS.maxClientMessageBytes);
  const envelope = JSON.stringify({ type: 'append-system-context', text: '' }).length;
  const fits = { type: 'append-system-context', text: 'a'.repeat(SESSION_MESSAGE_LIMITS.maxClientMessageBytes - envelope) };
  t.deepEqual((parseSignallingMessage(JSON.stringify({ type: 'client_message', message: fits })) as { message: unknown }).message, fits, 'exactly at the limit');
  const over = { ...fits, text: `${fits.text}a` };
  const error = t.throws(() => parseSignallingMessage(JSON.stringify({ type: 'client_message', message: over })), { instanceOf: SignallingError });
  t.is(error!.code, 'message_too_large');
  t.false(error!.fatal);
});

function channel() {
  const sent: SignallingServerMessage[] = [];
  const closes: string[] = [];
  return { sent, closes, send: (m: SignallingServerMessage) => sent.push(m), close: (code: string) => closes.push(code) };
}

test('messages reach the room in order, tagged with their sender; presence follows joins and departures', async (t) => {
  const rooms = new RoomRegistry();
  const created = rooms.createRoom();
  const room = rooms.get(created.room)!;
  const messages: RoomClientMessage[] = [];
  const events: RoomSubscriberEvent[] = [];
  let completed = 0;
  room.clientMessages.subscribe({ next: (m) => messages.push(m), complete: () => completed++ });
  room.subscriberEvents.subscribe({ next: (e) => events.push(e), complete: () => completed++ });

  const grantA = rooms.authorize(created.room, created.subscriberToken, 'subscriber').grant.grantId;
  const second = rooms.issueToken(created.room, 'subscriber');
  const grantB = rooms.authorize(created.room, second, 'subscriber').grant.grantId;
  const a = room.join(grantA, channel());
  const b = room.join(grantB, channel());
  t.deepEqual(room.subscribers(), [{ participantId: a.participantId, peerState: 'none' }, { participantId: b.participantId, peerState: 'none' }]);

  const say = (p: typeof a, message: unknown) => p.handle(parseSignallingMessage(JSON.stringify({ type: 'client_message', message })));
  await say(a, { type: 'client-ready', version: '1.0.0' });
  await say(b, { type: 'hang-up' });
  await say(a, { type: 'append-system-context', text: 'The user is on the pricing page.' });
  t.deepEqual(messages, [
    { participantId: a.participantId, message: { type: 'client-ready', version: '1.0.0' } },
    { participantId: b.participantId, message: { type: 'hang-up' } },
    { participantId: a.participantId, message: { type: 'append-system-context', text: 'The user is on the pricing page.' } },
  ]);

  // The same token joining again replaces the first connection (a reloaded page).
  const a2Channel = channel();
  const a2 = room.join(grantA, a2Channel);
  await say(a, { type: 'hang-up' }); // from the replaced connection: not delivered
  t.is(messages.length, 3);
  await b.handle({ type: 'leave' });
  a2.leave(); // the socket closed
  t.deepEqual(events, [
    { type: 'joined', participantId: a.participantId },
    { type: 'joined', participantId: b.participantId },
    { type: 'left', participantId: a.participantId, reason: 'replaced' },
    { type: 'joined', participantId: a2.participantId },
    { type: 'left', participantId: b.participantId, reason: 'left' },
    { type: 'left', participantId: a2.participantId, reason: 'disconnected' },
  ]);
  t.deepEqual(room.subscribers(), []);

  const c = room.join(rooms.authorize(created.room, rooms.issueToken(created.room, 'subscriber'), 'subscriber').grant.grantId, channel());
  rooms.closeRoom(created.room);
  t.deepEqual(events.at(-1), { type: 'left', participantId: c.participantId, reason: 'room closed' });
  t.is(completed, 2, 'both streams complete when the room closes');
});
