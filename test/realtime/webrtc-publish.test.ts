/**
 * Direct WebRTC through the running server: a /realtime session asks (with its `webrtc`
 * message) to be published into an embedded room of the same server (mountRooms); the room
 * then has the session as its publisher and the WebSocket stops carrying frames. Browser
 * decoding of such a publication is covered in test/webrtc.
 */
import test from 'ava';
import { facePlugin } from '../../plugins/face/index.ts';
import type { RealtimeEndpoint } from '../../server/realtime/index.ts';
import type { MountedRooms } from '../../server/rooms/index.ts';
import { startTestServer, type TestServer } from '../server/harness.ts';
import { until } from '../../testing/until.ts';
import { connectRaw, delay, isReady } from './ws-conn.ts';

let ts: TestServer;
let rooms: MountedRooms;
let endpoint: RealtimeEndpoint;

test.before(async () => {
  // Face sessions admitted by slots only: these tests open several at once, and a loaded test machine's
  // late frames would refuse one at random; the late-frame rule has its own tests (operations-overload).
  ts = await startTestServer({ label: 'realtime_webrtc', plugins: [facePlugin], config: { capacityLoadCheck: false }, surfaces: { realtime: true, rooms: true } });
  rooms = ts.server.rooms!;
  endpoint = ts.server.realtime!;
});

test.after.always(async () => {
  await ts?.stop();
});

const open = () => connectRaw(`${ts.url.replace(/^http/, 'ws')}/realtime?config_id=svc/human-portrait`, { 'x-api-key': ts.keyA });

test.serial('a session publishes into an embedded room of this server and stops sending frames over the socket', async (t) => {
  const created = rooms.rooms.createRoom();
  const c = open();
  t.teardown(() => c.ws.close());
  await c.next(isReady);
  c.ws.send(JSON.stringify({ type: 'webrtc', settings: { provider: 'embedded', room: created.room, token: created.publisherToken } }));
  const connected = await c.next((m) => m.type === 'webrtc_connected');
  t.like(connected, { type: 'webrtc_connected', room: created.room });
  t.is(rooms.rooms.get(created.room)?.publisherId, connected.type === 'webrtc_connected' ? connected.participant_id : 'none');
  // Frames already on the wire may still arrive; then none for 10 frame periods (a loaded machine
  // delays the last ones, it does not make new ones: a session that kept sending never goes quiet).
  const quiet = await until(async () => {
    const before = c.frames.length;
    await delay(400);
    return c.frames.length === before;
  }, { timeoutMs: 10_000, intervalMs: 0, what: 'the frames over the WebSocket to stop' }).catch(() => false);
  t.true(quiet, 'no frames over the WebSocket while the room carries them');

  // A second request in the same session is refused without ending it.
  c.ws.send(JSON.stringify({ type: 'webrtc', settings: { provider: 'embedded', room: created.room, token: created.publisherToken } }));
  t.like(await c.next((m) => m.type === 'error'), { code: 'webrtc_failed', fatal: false });

  // Closing the session frees the room's publisher slot.
  c.ws.close();
  await until(() => !rooms.rooms.get(created.room)?.publisherId, { timeoutMs: 5000, intervalMs: 20, what: "the room's publisher slot to be freed" });
  t.is(rooms.rooms.get(created.room)?.publisherId, null);
});

test.serial('two webrtc requests at once publish once: the second is refused while the first still joins', async (t) => {
  const first = rooms.rooms.createRoom();
  const second = rooms.rooms.createRoom();
  const c = open();
  t.teardown(() => c.ws.close());
  await c.next(isReady);
  // Two rooms, so that no room refuses the second itself (a room takes one publisher): the session must.
  c.ws.send(JSON.stringify({ type: 'webrtc', settings: { provider: 'embedded', room: first.room, token: first.publisherToken } }));
  c.ws.send(JSON.stringify({ type: 'webrtc', settings: { provider: 'embedded', room: second.room, token: second.publisherToken } }));
  t.like(await c.next((m) => m.type === 'error'), { code: 'webrtc_failed', fatal: false, message: 'this session already publishes to a room' });
  const connected = await c.next((m) => m.type === 'webrtc_connected');
  t.like(connected, { room: first.room });
  t.is(c.messages.filter((m) => m.type === 'webrtc_connected').length, 1);
  t.is(rooms.rooms.get(second.room)?.publisherId, null, 'nothing published into the second room');
  c.ws.close();
  await until(() => !rooms.rooms.get(first.room)?.publisherId, { timeoutMs: 5000, intervalMs: 20, what: "the first room's publisher slot to be freed" });
});

test.serial('a wrong room token or an unknown room is webrtc_failed; the session keeps its frames on the socket', async (t) => {
  const created = rooms.rooms.createRoom();
  const c = open();
  t.teardown(() => c.ws.close());
  await c.next(isReady);
  c.ws.send(JSON.stringify({ type: 'webrtc', settings: { provider: 'embedded', room: created.room, token: created.subscriberToken } }));
  const refused = await c.next((m) => m.type === 'error');
  t.like(refused, { code: 'webrtc_failed', fatal: false });
  c.ws.send(JSON.stringify({ type: 'webrtc', settings: { provider: 'embedded', room: 'no-such-room', token: created.publisherToken } }));
  await c.next((m) => m.type === 'error' && m !== refused);
  t.is(c.messages.filter((m) => m.type === 'error').length, 2);
  const before = c.frames.length;
  t.true(await until(() => c.frames.length > before, { timeoutMs: 10_000, what: 'another frame over the socket' }).catch(() => false), 'frames still come over the socket');
  t.is(rooms.rooms.get(created.room)?.publisherId, null);
});

test.serial('the browser room client is served publicly as JavaScript', async (t) => {
  const res = await fetch(`${ts.url}/v1/rooms/client.js`);
  t.is(res.status, 200);
  t.regex(res.headers.get('content-type') ?? '', /javascript/);
  t.true((await res.text()).length > 500);
});

test.serial('the room closing under a live publication: the client is told (webrtc_failed, not fatal) and the frames come over the socket again', async (t) => {
  const created = rooms.rooms.createRoom();
  const c = open();
  t.teardown(() => c.ws.close());
  await c.next(isReady);
  c.ws.send(JSON.stringify({ type: 'webrtc', settings: { provider: 'embedded', room: created.room, token: created.publisherToken } }));
  await c.next((m) => m.type === 'webrtc_connected');
  rooms.rooms.closeRoom(created.room, 'closed by its owner');
  t.like(await c.next((m) => m.type === 'error'), { code: 'webrtc_failed', fatal: false });
  const before = c.frames.length;
  await c.framesUntil(() => c.frames.length > before + 10);
  t.is(c.ws.readyState, c.ws.OPEN, 'the session goes on');
  // It can publish again, into another room.
  const next = rooms.rooms.createRoom();
  c.ws.send(JSON.stringify({ type: 'webrtc', settings: { provider: 'embedded', room: next.room, token: next.publisherToken } }));
  t.like(await c.next((m) => m.type === 'webrtc_connected' && m.room === next.room), { type: 'webrtc_connected' });
});
