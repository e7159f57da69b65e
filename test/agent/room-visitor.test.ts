/**
 * The bots' test visitor (room-visitor.ts) leaves nothing running when its join fails: its
 * microphone pump and its socket would keep a test's process alive after the test failed (a CI
 * run under load: "Failed to exit", then ava's run timeout, and the rest of the file lost).
 */
import test from 'ava';
import { RoomRegistry } from '../../transports/webrtc/index.ts';
import { until } from '../../testing/until.ts';
import { startRoomServer } from '../webrtc/browser.ts';
import { RoomVisitor } from './room-visitor.ts';

const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;

test('a visitor whose join is refused stops its microphone pump and closes its socket', async (t) => {
  const rooms = new RoomRegistry({ maxSubscribersPerRoom: 2 });
  const server = await startRoomServer(rooms);
  t.teardown(() => server.close());
  rooms.createRoom();
  const before = timers();
  const error = await t.throwsAsync(RoomVisitor.join(server.signalUrl, 'rt_not_a_token'));
  t.truthy(error?.message, 'the join is refused with a reason');
  await until(() => server.signalling.connections === 0, { timeoutMs: 5_000, intervalMs: 10, what: 'the server to see the socket closed' });
  // The sockets' closing handshakes hold a timer each until they are done; the pump (every 10 ms) would stay.
  await until(() => timers() <= before, { timeoutMs: 5_000, intervalMs: 10, what: 'no timer of the visitor left' }).catch(() => undefined);
  t.is(timers(), before, 'no timer of the visitor is left');
});
