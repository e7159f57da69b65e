/**
 * Bot -> client messages through an embedded room to a real browser: the publisher's
 * `sendMessage` reaches every joined page over its signalling connection, in order; a
 * client-mode tool call becomes the spec's `svcToolCall` CustomEvent on window with parsed
 * arguments; other messages are only `message` events; nothing is sent back.
 */
import test from 'ava';
import { holdsWithin } from '../../testing/until.ts';
import { publishAvatar, RoomRegistry, type PublishedAvatar } from '../../transports/webrtc/index.ts';
import { launchChromium, startRoomServer, type Browser, type RoomTestServer } from './browser.ts';
import { joinRoom } from './page-probe.ts';
import { syntheticFaceFrames } from './synthetic-face.ts';

let browser: Browser;
let server: RoomTestServer;
const rooms = new RoomRegistry();
const publishers: PublishedAvatar[] = [];

test.before(async () => {
  browser = await launchChromium();
  server = await startRoomServer(rooms);
});

test.after.always(async () => {
  for (const p of publishers) await p.close();
  rooms.closeAll();
  await server?.close();
  await browser?.close();
});

const listenForToolCalls = `
  window.__toolCalls = [];
  window.__messages = [];
  window.addEventListener('svcToolCall', (e) => window.__toolCalls.push({ detail: e.detail, onWindow: e.target === window, type: e.constructor.name }));
`;

test.serial('a client-mode tool call reaches every joined page as svcToolCall on window, with parsed arguments', async (t) => {
  const created = rooms.createRoom();
  const published = await publishAvatar(await syntheticFaceFrames({ width: 160, height: 120 }), { provider: 'embedded', room: created.room, token: created.publisherToken }, { rooms });
  publishers.push(published);
  const pages = [await browser.newPage(server.httpUrl), await browser.newPage(server.httpUrl)];
  for (const page of pages) {
    await page.evaluate(listenForToolCalls);
    t.true((await joinRoom(page, { url: server.signalUrl, room: created.room, token: rooms.issueToken(created.room, 'subscriber') })).ok);
    await page.evaluate(() => (window as any).__room.on('message', (m: unknown) => (window as any).__messages.push(m)));
  }
  t.is(published.sendMessage!({ type: 'bot-transcript', text: 'Opening the pricing page.' }), 2);
  t.is(published.sendMessage!({ type: 'tool-call', function_name: 'open_page', tool_call_id: 'call_1', arguments: { url: '/pricing', new_tab: false } }), 2);
  // A string of JSON arguments is parsed too (the wire form of some providers).
  published.sendMessage!({ type: 'tool-call', function_name: 'highlight', tool_call_id: 'call_2', arguments: '{"selector":"#plans"}' });

  for (const page of pages) {
    await page.waitForFunction(() => (window as any).__toolCalls.length >= 2, undefined, { timeout: 10_000 });
    const seen = await page.evaluate(() => ({ calls: (window as any).__toolCalls, messages: (window as any).__messages }));
    t.deepEqual(seen.calls, [
      { detail: { function_name: 'open_page', tool_call_id: 'call_1', arguments: { url: '/pricing', new_tab: false } }, onWindow: true, type: 'CustomEvent' },
      { detail: { function_name: 'highlight', tool_call_id: 'call_2', arguments: { selector: '#plans' } }, onWindow: true, type: 'CustomEvent' },
    ]);
    t.deepEqual(seen.messages.map((m: { type: string }) => m.type), ['bot-transcript', 'tool-call', 'tool-call'], 'every message, in order');
  }
});

test.serial('only the current publisher can message the room; after it ends nothing is sent', async (t) => {
  const created = rooms.createRoom();
  const published = await publishAvatar(await syntheticFaceFrames({ width: 160, height: 120 }), { provider: 'embedded', room: created.room, token: created.publisherToken }, { rooms });
  const page = await browser.newPage(server.httpUrl);
  await page.evaluate(listenForToolCalls);
  t.true((await joinRoom(page, { url: server.signalUrl, room: created.room, token: created.subscriberToken })).ok);
  t.throws(() => published.sendMessage!(['not', 'an', 'object'] as never), { instanceOf: TypeError });
  await published.close();
  t.is(published.sendMessage!({ type: 'tool-call', function_name: 'late', tool_call_id: 'call_9', arguments: {} }), 0);
  await new Promise((r) => setTimeout(r, 300));
  t.deepEqual(await page.evaluate(() => (window as any).__toolCalls), []);
});

test.serial('the page sends messages to the bot with room.sendMessage: they reach Room.clientMessages in order, tagged with the page', async (t) => {
  const created = rooms.createRoom();
  const room = rooms.get(created.room)!;
  const received: { participantId: string; message: unknown }[] = [];
  room.clientMessages.subscribe((m) => received.push(m));
  const page = await browser.newPage(server.httpUrl);
  t.true((await joinRoom(page, { url: server.signalUrl, room: created.room, token: created.subscriberToken })).ok);
  const participantId = await page.evaluate(() => (window as any).__room.participantId as string);
  const results = await page.evaluate(() => {
    const r = (window as any).__room;
    const sent = [r.sendMessage({ type: 'client-ready', version: '1.0.0', about: { library: 'test' } }), r.sendMessage({ type: 'hang-up' })];
    let refused = '';
    try {
      r.sendMessage(['not', 'an', 'object']);
    } catch (e) {
      refused = (e as Error).name;
    }
    return { sent, refused };
  });
  t.deepEqual(results, { sent: [true, true], refused: 'TypeError' });
  await holdsWithin(() => received.length >= 2, { timeoutMs: 10_000, intervalMs: 20 });
  t.deepEqual(received, [
    { participantId, message: { type: 'client-ready', version: '1.0.0', about: { library: 'test' } } },
    { participantId, message: { type: 'hang-up' } },
  ]);
  await page.evaluate(() => (window as any).__room.leave());
  t.false(await page.evaluate(() => (window as any).__room.sendMessage({ type: 'hang-up' })), 'false once the page left');
});
