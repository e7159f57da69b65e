/**
 * The embedded publisher's audio goes out when due (AudioPacer): a face frame's 40 ms are sent
 * 10 ms at a time, never held back by more than the rest of one frame, and a turn's speech
 * starting between frames waits for at most one chunk of silence sent ahead of it.
 */
import test from 'ava';
import { VirtualClock } from '../../core/clock.ts';
import { AudioPacer } from '../../transports/webrtc/audio-pacer.ts';

const CHUNK = 480; // 10 ms at 48 kHz

function silentFrame(): Int16Array[] {
  return [0, 1, 2, 3].map(() => new Int16Array(CHUNK));
}

/** A frame with sound: chunk i of frame `mark` holds the value mark * 10 + i + 1. */
function soundFrame(mark: number): Int16Array[] {
  return [0, 1, 2, 3].map((i) => new Int16Array(CHUNK).fill(mark * 10 + i + 1));
}

function setup(chunkMs = 10) {
  const clock = new VirtualClock();
  const t0 = clock.now();
  const sent: Array<[number, number]> = [];
  const pacer = new AudioPacer((c) => sent.push([clock.now() - t0, c[0]!]), chunkMs, clock);
  return { clock, t0, sent, pacer };
}

test("a frame's audio goes out 10 ms at a time, the first chunk at once", async (t) => {
  const { clock, sent, pacer } = setup();
  pacer.deliver(soundFrame(1));
  await clock.advance(40);
  pacer.deliver(silentFrame());
  await clock.advance(40);
  t.deepEqual(sent, [[0, 11], [10, 12], [20, 13], [30, 14], [40, 0], [50, 0], [60, 0], [70, 0]]);
  t.is(clock.pendingTimers(), 0, 'no timer left once everything was sent');
});

test('speech starting between frames drops the silence not yet sent and starts at once', async (t) => {
  const { clock, sent, pacer } = setup();
  pacer.deliver(silentFrame());
  await clock.advance(15);
  // Two chunks sent (at 0 and 10 ms): the speech follows 20 ms of silence, not 40.
  pacer.speechStarting();
  pacer.deliver(soundFrame(1));
  await clock.advance(40);
  t.deepEqual(sent, [[0, 0], [10, 0], [15, 11], [25, 12], [35, 13], [45, 14]]);
  t.is(pacer.droppedChunks, 2);
});

test('sound still waiting when speech starts is sent, never dropped', async (t) => {
  const { clock, sent, pacer } = setup();
  pacer.deliver(soundFrame(1));
  await clock.advance(5);
  pacer.speechStarting();
  t.deepEqual(sent.map(([, v]) => v), [11, 12, 13, 14]);
  t.is(pacer.droppedChunks, 0);
});

test('the next frame sends what still waits of the one before: audio is never held back by more than one frame', async (t) => {
  // Frames that come faster than real time (a stall caught up) must not build a queue.
  const { clock, sent, pacer } = setup();
  pacer.deliver(soundFrame(1));
  pacer.deliver(soundFrame(2));
  pacer.deliver(soundFrame(3));
  t.deepEqual(sent.map(([, v]) => v), [11, 12, 13, 14, 21, 22, 23, 24, 31]);
  t.is(pacer.pendingChunks, 3);
  await clock.advance(30);
  t.deepEqual(sent.slice(-3), [[10, 32], [20, 33], [30, 34]]);
});

test('stopping drops what waits and leaves no timer; nothing is sent after', async (t) => {
  const { clock, sent, pacer } = setup();
  pacer.deliver(silentFrame());
  pacer.stop();
  t.is(clock.pendingTimers(), 0);
  pacer.deliver(soundFrame(1));
  await clock.advance(100);
  t.is(sent.length, 1);
});

test('at the end of the stream what waits goes out at once, and nothing after', async (t) => {
  const { clock, sent, pacer } = setup();
  pacer.deliver(soundFrame(1));
  pacer.finish();
  t.deepEqual(sent.map(([at, v]) => [at, v]), [[0, 11], [0, 12], [0, 13], [0, 14]]);
  t.is(clock.pendingTimers(), 0);
  pacer.deliver(soundFrame(2));
  await clock.advance(50);
  t.is(sent.length, 4);
});

test('with chunkMs 0 every chunk goes at once, as delivered', async (t) => {
  const { clock, sent, pacer } = setup(0);
  pacer.deliver(silentFrame());
  pacer.speechStarting();
  pacer.deliver(soundFrame(1));
  t.is(sent.length, 8);
  t.true(sent.every(([at]) => at === 0));
  t.is(clock.pendingTimers(), 0);
});
