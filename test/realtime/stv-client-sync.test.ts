/**
 * SvcSTVClient against the real /realtime endpoint: every played audio frame is exactly the
 * audio the server animated that picture with (streaming TTS slower than real time, utterances
 * back to back), re-sync after barge-in, and the events the spec lists (payloads, firing rules).
 */
import test from 'ava';
import type { MountedRooms } from '../../server/rooms/index.ts';
import type { FrameOutMessage } from '../../protocol/realtime.ts';
import { SvcSTVClient, type STVAudioFrame, type STVEventName, type STVOutput } from '../../transports/realtime/stv-client.ts';
import type { TestServer } from '../server/harness.ts';
import { startRealtimeServer, type RealtimeServer } from '../support/realtime-server.ts';
import { delay, tone } from './ws-conn.ts';
import { until } from '../../testing/until.ts';

let ts: TestServer;
let rooms: MountedRooms;
let url: string;
let configId: string;

let fixture: RealtimeServer | undefined;
test.before(async () => {
  // Rooms mounted: the endpoint publishes the avatar into them for `webrtc` sessions.
  fixture = await startRealtimeServer({ label: 'stv_sync', canvas: { width: 192, height: 128 }, rooms: true });
  ({ ts, url, configId } = fixture);
  rooms = fixture.rooms!;
});

test.after.always(async () => {
  await fixture?.stop();
});

/** Waits for the client's events: polled every 20 ms, bounded at 20 s. */
const EVENT_WAIT = { timeoutMs: 20_000, intervalMs: 20 } as const;

/** A client whose raw server frames are recorded next to its played output. */
async function start(t: { teardown(fn: () => void): void }) {
  const client = new SvcSTVClient({ apiKey: ts.keyA, configId, url, outputSampleRate: 16_000 });
  t.teardown(() => client.close());
  const events: Array<[STVEventName, Record<string, unknown>]> = [];
  for (const e of ['SESSION_READY', 'FIRST_FRAME', 'WEBRTC_CONNECTED', 'BOT_STARTED_SPEAKING', 'BOT_STOPPED_SPEAKING', 'INTERRUPTED', 'ERROR', 'CLOSED'] as const) {
    client.on(e, (p) => void events.push([e, p]));
  }
  const server = new Map<number, FrameOutMessage>();
  client.client.messages$.subscribe((m) => void (m.type === 'frame' && server.set(m.frame.index, m.frame)));
  const played: STVOutput[] = [];
  const pump = (async () => {
    for await (const o of client.outputStream()) played.push(o);
  })();
  await client.connect();
  const audio = () => played.filter((o): o is STVAudioFrame => o.kind === 'audio');
  const count = (e: STVEventName) => events.filter(([x]) => x === e).length;
  /** Names of the events so far, for the message of a wait that timed out. */
  const seen = () => events.map(([e]) => e).join(',');
  return { client, events, server, played, audio, count, seen, pump };
}

/** Every played audio frame equals the server frame's audio (16 kHz in and out: no resampling). */
function assertInSync(t: { deepEqual(a: unknown, b: unknown, m?: string): void; true(v: boolean, m?: string): void }, audio: STVAudioFrame[], server: Map<number, FrameOutMessage>) {
  const speech = audio.filter((a) => ['speech', 'speech-start'].includes(server.get(a.frameIndex)?.type ?? ''));
  t.true(speech.length > 10, 'speech was played');
  for (const a of speech) t.deepEqual(Array.from(a.pcm), Array.from(server.get(a.frameIndex)!.audio), `frame ${a.frameIndex}`);
}

test.serial('streaming TTS slower than real time: each played frame carries exactly the audio its picture was animated with', async (t) => {
  const s = await start(t);
  s.client.startTurn();
  for (let i = 0; i < 4; i++) {
    s.client.sendTtsAudio(tone(150), 16_000); // 150 ms of speech, then a 400 ms gap: the server underruns
    await delay(400);
  }
  s.client.endTurn();
  await until(() => s.count('BOT_STOPPED_SPEAKING') === 1, { ...EVENT_WAIT, what: () => `BOT_STOPPED_SPEAKING (1 in all); events so far: ${s.seen()}` });
  const underruns = [...s.server.values()].filter((f) => f.type === 'speech' && f.audio.every((v) => v === 0)).length;
  t.true(underruns > 5, `the server waited for audio mid-turn (${underruns} frames)`);
  assertInSync(t, s.audio(), s.server);
});

test.serial('utterances back to back (lengths not multiples of 40 ms) stay aligned at every boundary', async (t) => {
  const s = await start(t);
  s.client.say(tone(330), 16_000);
  s.client.say(tone(470), 16_000);
  s.client.say(tone(250), 16_000);
  await until(() => s.count('BOT_STOPPED_SPEAKING') === 3, { ...EVENT_WAIT, what: () => `BOT_STOPPED_SPEAKING (3 in all); events so far: ${s.seen()}` });
  assertInSync(t, s.audio(), s.server);
  t.deepEqual(s.events.filter(([e]) => e.startsWith('BOT_')).map(([e]) => e), ['BOT_STARTED_SPEAKING', 'BOT_STOPPED_SPEAKING', 'BOT_STARTED_SPEAKING', 'BOT_STOPPED_SPEAKING', 'BOT_STARTED_SPEAKING', 'BOT_STOPPED_SPEAKING']);
});

test.serial('client re-sync after barge-in: no speech of the cancelled turn plays, the next utterance plays whole and in sync', async (t) => {
  const s = await start(t);
  const first = tone(3000);
  s.client.say(first, 16_000);
  await until(() => s.count('BOT_STARTED_SPEAKING') === 1, { ...EVENT_WAIT, what: () => `BOT_STARTED_SPEAKING (1 in all); events so far: ${s.seen()}` });
  t.true(s.client.interrupt());
  const cut = s.audio().length;
  await until(() => s.count('INTERRUPTED') === 1, { ...EVENT_WAIT, what: () => `INTERRUPTED (1 in all); events so far: ${s.seen()}` });
  const second = Int16Array.from(tone(600), (v) => (v === 0 ? 1 : -v)); // distinguishable from the first
  s.client.say(second, 16_000);
  await until(() => s.count('BOT_STOPPED_SPEAKING') === 2, { ...EVENT_WAIT, what: () => `BOT_STOPPED_SPEAKING (2 in all); events so far: ${s.seen()}` });
  const after = s.audio().slice(cut + 2).flatMap((a) => Array.from(a.pcm)).filter((v) => v !== 0);
  t.deepEqual(after, Array.from(second), 'after the barge-in: exactly the new utterance, nothing of the old one');
  t.like(s.events.find(([e]) => e === 'INTERRUPTED')![1], { had_speech: true });
  t.like(s.events.find(([e]) => e === 'BOT_STOPPED_SPEAKING')![1], { interrupted: true });
  assertInSync(t, s.audio().slice(cut + 2), s.server);
});

test.serial('events: FIRST_FRAME carries frame_type, ERROR carries message, WEBRTC_CONNECTED carries participant_id, CLOSED on teardown', async (t) => {
  const s = await start(t);
  await until(() => s.count('FIRST_FRAME') === 1, { ...EVENT_WAIT, what: () => `FIRST_FRAME (1 in all); events so far: ${s.seen()}` });
  t.like(s.events.find(([e]) => e === 'FIRST_FRAME')![1], { frame_type: 'idle' });
  s.client.client.send({ type: 'webrtc', settings: { provider: 'embedded', room: 'no-such-room', token: 'x' } });
  await until(() => s.count('ERROR') === 1, { ...EVENT_WAIT, what: () => `ERROR (1 in all); events so far: ${s.seen()}` });
  const error = s.events.find(([e]) => e === 'ERROR')![1];
  t.like(error, { code: 'webrtc_failed' });
  t.is(typeof error.message, 'string');
  const room = rooms.rooms.createRoom();
  s.client.client.send({ type: 'webrtc', settings: { provider: 'embedded', room: room.room, token: room.publisherToken } });
  await until(() => s.count('WEBRTC_CONNECTED') === 1, { ...EVENT_WAIT, what: () => `WEBRTC_CONNECTED (1 in all); events so far: ${s.seen()}` });
  t.is(s.events.find(([e]) => e === 'WEBRTC_CONNECTED')![1].participant_id, rooms.rooms.get(room.room)?.publisherId);
  t.true(s.client.isConnected);
  s.client.close();
  await s.pump;
  t.is(s.count('CLOSED'), 1);
  t.false(s.client.isConnected);
  t.is(s.events.at(-1)![0], 'CLOSED');
});
