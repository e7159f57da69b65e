/**
 * The high-level client against the real /realtime endpoint: TTS audio at any rate in,
 * synchronized audio and video out, events, barge-in re-sync.
 */
import test from 'ava';
import { until } from '../../testing/until.ts';
import { Resampler, concat } from '../../core/audio.ts';
import { VirtualClock } from '../../core/clock.ts';
import type { RealtimeEndpoint } from '../../server/realtime/index.ts';
import { SvcSTVClient, type STVAudioFrame, type STVEventName, type STVOutput } from '../../transports/realtime/stv-client.ts';
import { SvcClient, SvcClientError } from '../../transports/realtime/svc-client.ts';
import type { TestServer } from '../server/harness.ts';
import { startRealtimeServer, type RealtimeServer } from '../support/realtime-server.ts';
import { delay } from './ws-conn.ts';

let ts: TestServer;
let endpoint: RealtimeEndpoint;
let url: string;
let configId: string;

let fixture: RealtimeServer | undefined;
test.before(async () => {
  fixture = await startRealtimeServer({ label: 'stvclient', canvas: { width: 256, height: 192 } });
  ({ ts, endpoint, url, configId } = fixture);
});

test.after.always(async () => {
  await fixture?.stop();
});

/** A 24 kHz "TTS" signal whose every sample encodes its own position, so order can be checked. */
function ramp(ms: number, rate = 24_000): Int16Array {
  return Int16Array.from({ length: (ms * rate) / 1000 }, (_, i) => 1000 + (i % 20_000));
}

async function collect(client: SvcSTVClient, until: (out: STVOutput[]) => boolean, timeoutMs = 15_000): Promise<STVOutput[]> {
  const out: STVOutput[] = [];
  const deadline = Date.now() + timeoutMs;
  for await (const item of client.outputStream()) {
    out.push(item);
    if (until(out) || Date.now() > deadline) break;
  }
  return out;
}

test.serial('the low-level client refuses a bad key with the server\'s typed error', async (t) => {
  const client = new SvcClient({ apiKey: 'svc_wrong', configId, url });
  const err = await t.throwsAsync(() => client.connect(), { instanceOf: SvcClientError });
  t.is(err?.code, 'auth_failed');
});

test.serial('say() at 24 kHz: audio comes back at 24 kHz in 40 ms slices, in order, with RGB video and speaking events', async (t) => {
  const handlerErrors: string[] = [];
  const client = new SvcSTVClient({ apiKey: ts.keyA, configId, url, onHandlerError: (e, err) => handlerErrors.push(`${e}: ${(err as Error).message}`) });
  const events: Array<[STVEventName, Record<string, unknown>]> = [];
  for (const e of ['SESSION_READY', 'FIRST_FRAME', 'BOT_STARTED_SPEAKING', 'BOT_STOPPED_SPEAKING', 'CLOSED'] as const) client.on(e, (p) => void events.push([e, p]));
  client.on('BOT_STARTED_SPEAKING', () => {
    throw new Error('a broken handler');
  });
  client.on('BOT_STARTED_SPEAKING', async () => {
    throw new Error('a broken async handler');
  });
  const ready = await client.connect();
  t.true(client.isConnected);
  const sent = ramp(800);
  client.say(sent, 24_000);
  const out = await collect(client, () => events.some(([e]) => e === 'BOT_STOPPED_SPEAKING'));
  const audio = out.filter((o): o is STVAudioFrame => o.kind === 'audio');
  const video = out.filter((o) => o.kind === 'video');
  t.true(audio.every((a) => a.sampleRate === 24_000 && a.pcm.length === 960));
  t.true(video.every((v) => v.kind === 'video' && v.rgb.length === ready.width * ready.height * 3));
  t.true(video.length >= audio.length - 2, 'video frames accompany the audio');
  const speech = audio.flatMap((a) => Array.from(a.pcm)).filter((v) => v !== 0);
  t.deepEqual(speech, Array.from(sent), 'the original 24 kHz audio, complete and in order, despite the throwing handlers');
  t.deepEqual(events.map(([e]) => e).slice(0, 4), ['SESSION_READY', 'FIRST_FRAME', 'BOT_STARTED_SPEAKING', 'BOT_STOPPED_SPEAKING']);
  t.deepEqual(handlerErrors.sort(), ['BOT_STARTED_SPEAKING: a broken async handler', 'BOT_STARTED_SPEAKING: a broken handler']);
  client.close();
  t.false(client.isConnected);
});

test.serial('interrupt(): true while speaking, then the stream re-syncs on silence; false when idle', async (t) => {
  const client = new SvcSTVClient({ apiKey: ts.keyA, configId, url });
  const interrupted: unknown[] = [];
  client.on('INTERRUPTED', (p) => void interrupted.push(p));
  await client.connect();
  t.false(client.interrupt(), 'nothing to interrupt yet');
  client.say(ramp(4000), 24_000);
  let sentCancel = false;
  const out = await collect(client, (o) => {
    const speechFrames = o.filter((x) => x.kind === 'audio' && x.pcm.some((v) => v !== 0)).length;
    if (!sentCancel && speechFrames >= 5) sentCancel = client.interrupt();
    return sentCancel && o.filter((x) => x.kind === 'audio').length > speechFrames + 25;
  });
  t.true(sentCancel);
  const audio = out.filter((o): o is STVAudioFrame => o.kind === 'audio');
  const lastSpeech = audio.map((a) => a.pcm.some((v) => v !== 0)).lastIndexOf(true);
  const firstSpeech = audio.findIndex((a) => a.pcm.some((v) => v !== 0));
  t.true(lastSpeech - firstSpeech < 12, `speech stopped within a few frames of the barge-in (${lastSpeech - firstSpeech} frames of speech)`);
  t.true(audio.slice(lastSpeech + 1).length >= 20, 'the clock kept running: silent frames after the barge-in');
  t.is(interrupted.length, 1);
  t.false(client.interrupt(), 'nothing left to interrupt');
  client.close();
});

const voiced = (audio: STVAudioFrame[]) => audio.flatMap((a) => Array.from(a.pcm)).filter((v) => v !== 0);

test.serial('frames buffered before the first TTS audio are reported at 16 kHz, the rate of their samples', async (t) => {
  // A virtual playback clock: the real server's idle frames pile up in the jitter buffer until the test advances it.
  const clock = new VirtualClock(1_000);
  const client = new SvcSTVClient({ apiKey: ts.keyA, configId, url, clock });
  t.teardown(() => client.close());
  let received = 0;
  client.client.messages$.subscribe((m) => void (m.type === 'frame' && received++));
  const stopped: unknown[] = [];
  client.on('BOT_STOPPED_SPEAKING', (p) => void stopped.push(p));
  const out: STVOutput[] = [];
  const pump = (async () => {
    for await (const o of client.outputStream()) out.push(o);
  })();
  await client.connect();
  const deadline = Date.now() + 15_000;
  await until(() => received >= 4, { timeoutMs: 15_000, what: () => `four idle frames before any TTS audio (${received} so far)` });
  t.true(received >= 4, 'idle frames arrived before any TTS audio');
  const sent = ramp(400);
  client.say(sent, 24_000);
  while (stopped.length === 0 && Date.now() < deadline) {
    await clock.advance(40);
    await delay(5);
  }
  t.is(stopped.length, 1, 'the utterance played to its end');
  const audio = out.filter((o): o is STVAudioFrame => o.kind === 'audio');
  t.true(audio.length >= 4);
  t.deepEqual(audio.slice(0, 4).map((a) => a.sampleRate), [16_000, 16_000, 16_000, 16_000], 'the frames buffered before say()');
  for (const a of audio) t.is(a.pcm.length, (a.sampleRate * 40) / 1000, `frame ${a.frameIndex}: 40 ms at the rate it reports`);
  t.true(audio.some((a) => a.sampleRate === 24_000));
  t.deepEqual(voiced(audio), Array.from(sent), 'the 24 kHz speech, whole and in order');
  client.close();
  await pump;
});

test.serial('a TTS rate change mid-utterance and endTurn() flush the output-copy resampler: every sample plays', async (t) => {
  const client = new SvcSTVClient({ apiKey: ts.keyA, configId, url, outputSampleRate: 48_000 });
  t.teardown(() => client.close());
  const stopped: unknown[] = [];
  client.on('BOT_STOPPED_SPEAKING', (p) => void stopped.push(p));
  await client.connect();
  const a = ramp(200, 24_000);
  const b = Int16Array.from(ramp(200, 16_000), (v) => -v);
  client.startTurn();
  client.sendTtsAudio(a, 24_000);
  client.sendTtsAudio(b, 16_000);
  client.endTurn();
  const out = await collect(client, () => stopped.length > 0);
  // What the client must play: each part resampled to 48 kHz on its own, tails included.
  const upA = new Resampler(24_000, 48_000);
  const upB = new Resampler(16_000, 48_000);
  const expected = concat([upA.process(a), upA.flush(), upB.process(b), upB.flush()]);
  t.is(expected.length, 9_600 * 2, '200 ms + 200 ms at 48 kHz');
  const audio = out.filter((o): o is STVAudioFrame => o.kind === 'audio');
  t.true(audio.every((a) => a.sampleRate === 48_000 && a.pcm.length === 1_920));
  const played = voiced(audio);
  t.is(played.length, Array.from(expected).filter((v) => v !== 0).length, 'no sample lost at the rate change or the end of the turn');
  t.deepEqual(played, Array.from(expected).filter((v) => v !== 0));
  client.close();
});

test.serial('a consumer that stops reading holds at most maxOutputFrames ticks, the newest; one reading in real time loses none', async (t) => {
  const client = new SvcSTVClient({ apiKey: ts.keyA, configId, url, maxOutputFrames: 5 });
  t.teardown(() => client.close());
  await client.connect();
  // Nobody reads: the clock plays on (idle frames, 25 a second) and only the newest 5 ticks wait.
  await until(() => client.outputDropped >= 10, { timeoutMs: 20_000, intervalMs: 20, what: 'ticks dropped while nobody reads' });
  t.is(client.outputQueuedFrames, 5);
  const out: STVOutput[] = [];
  const pump = (async () => {
    for await (const item of client.outputStream()) out.push(item);
  })();
  await until(() => out.length >= 10, { timeoutMs: 5_000, intervalMs: 5, what: 'the queued ticks read' });
  const droppedAtRead = client.outputDropped;
  const audio = () => out.filter((o): o is STVAudioFrame => o.kind === 'audio');
  t.true(audio()[0]!.frameIndex >= 10, `the oldest ticks were dropped: the first read is frame ${audio()[0]!.frameIndex}`);
  t.like(out[1], { kind: 'video', frameIndex: audio()[0]!.frameIndex, width: 256, height: 192 }, 'each tick keeps its picture');
  await until(() => audio().length >= 30, { timeoutMs: 20_000, intervalMs: 20, what: '20 more ticks read' });
  t.is(client.outputDropped, droppedAtRead, 'nothing more dropped while the consumer keeps up');
  const indices = audio().map((a) => a.frameIndex);
  t.deepEqual(indices, [...indices].sort((a, b) => a - b), 'in order');
  client.close();
  await pump;
  t.throws(() => new SvcSTVClient({ apiKey: ts.keyA, configId, url, maxOutputFrames: 0 }), { instanceOf: RangeError });
});

test.serial('after a stall, the playback buffer drains back to the jitter buffer during silence (and stays deep when draining is off)', async (t) => {
  const depthAfterStall = async (drainSlackFrames: number) => {
    const client = new SvcSTVClient({ apiKey: ts.keyA, configId, url, drainSlackFrames });
    const pump = (async () => {
      for await (const _ of client.outputStream()) { /* played */ }
    })();
    await client.connect();
    await delay(500); // playing idle frames
    // A stall: this process does nothing for 600 ms while frames keep coming (15 frames).
    const end = Date.now() + 600;
    while (Date.now() < end) { /* blocked */ }
    await delay(100);
    const stalled = client.bufferedFrames;
    await delay(2000); // 50 idle frames at 25 fps
    const after = client.bufferedFrames;
    client.close();
    await pump;
    return { stalled, after, dropped: client.dropped };
  };
  const on = await depthAfterStall(2);
  t.log(`draining on: ${JSON.stringify(on)}`);
  t.true(on.after <= 2 + 2, `${on.after} frames queued 2 s after the stall`);
  t.true(on.dropped > 0);
  const off = await depthAfterStall(100);
  t.log(`draining off: ${JSON.stringify(off)}`);
  t.true(off.after >= 8, `without draining the stall's frames stay queued (${off.after})`);
  t.throws(() => new SvcSTVClient({ apiKey: ts.keyA, configId, url, drainSlackFrames: -1 }), { instanceOf: RangeError });
});
