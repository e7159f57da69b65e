/**
 * The LiveKit publisher's conversions and failure paths, with the real @livekit/rtc-node SDK.
 * These tests prove the frames handed to LiveKit's sources are right and that a refused
 * connection surfaces as a clear `publish_failed`; publishing into a room (a fake LiveKit server
 * speaking the real signalling protocol) is in livekit-publish.test.ts.
 */
import test from 'ava';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { NEVER } from 'rxjs';
import { VideoBufferType, dispose, type LocalVideoTrack } from '@livekit/rtc-node';
import { LIVEKIT_MEDIA_DEFAULTS, LiveKitMediaSink, toLiveKitAudioFrame, toLiveKitVideoFrame } from '../../transports/livekit/index.ts';
import { imageToI420, publishAvatar, RoomError } from '../../transports/webrtc/index.ts';
import { VirtualClock } from '../../core/clock.ts';
import { renderSyntheticPictures, toneFrame } from './synthetic-face.ts';

test.after.always(async () => {
  await dispose();
});

test('an I420 picture handed to LiveKit converts back to the source colours', async (t) => {
  const [jpeg] = await renderSyntheticPictures(160, 120, 1); // blue canvas, yellow bar at the left
  const i420 = await imageToI420({ width: 160, height: 120, format: 'jpeg', data: jpeg! });
  const frame = toLiveKitVideoFrame(i420);
  t.is(frame.type, VideoBufferType.I420);
  t.is(frame.width, 160);
  const rgba = frame.convert(VideoBufferType.RGBA);
  t.is(rgba.data.byteLength, 160 * 120 * 4);
  const pixel = (x: number, y: number) => [...rgba.data.subarray((y * 160 + x) * 4, (y * 160 + x) * 4 + 3)];
  const [br, bg, bb] = pixel(120, 60); // canvas: rgb(30, 90, 200)
  t.true(Math.abs(br! - 30) < 12 && Math.abs(bg! - 90) < 12 && Math.abs(bb! - 200) < 12, `canvas ${pixel(120, 60)}`);
  const [yr, yg, yb] = pixel(8, 60); // bar: rgb(240, 240, 40)
  t.true(yr! > 200 && yg! > 200 && yb! < 90, `bar ${pixel(8, 60)}`);
  t.throws(() => toLiveKitVideoFrame({ width: 16, height: 16, data: new Uint8Array(5) }), { instanceOf: RangeError });
});

test('audio chunks become 10 ms 48 kHz mono AudioFrames', (t) => {
  const frame = toLiveKitAudioFrame(new Int16Array(480).fill(7));
  t.is(frame.sampleRate, 48_000);
  t.is(frame.channels, 1);
  t.is(frame.samplesPerChannel, 480);
  t.is(frame.data[100], 7);
});

test('the media sink feeds real LiveKit sources and creates the video track once, at the first picture size', async (t) => {
  const tracks: LocalVideoTrack[] = [];
  const sink = new LiveKitMediaSink((track) => void tracks.push(track));
  const [jpeg] = await renderSyntheticPictures(320, 240, 1);
  const picture = await imageToI420({ width: 320, height: 240, format: 'jpeg', data: jpeg! });
  const chunks = Array.from({ length: 4 }, (_, i) => toneFrame(i, 0.3).subarray(0, 480));
  await sink.deliver(null, chunks);
  t.is(tracks.length, 0, 'no picture yet, no video track');
  await sink.deliver(picture, chunks);
  await sink.deliver(picture, chunks);
  t.is(tracks.length, 1);
  t.is(tracks[0]!.name, 'avatar-video');
  t.deepEqual(sink.size, { width: 320, height: 240 });
  t.is(sink.audioSource.sampleRate, 48_000);
  await sink.close();
});

/** 40 ms of 48 kHz audio as four 10 ms chunks: silence, or a tone. */
const chunks40 = (tone: boolean) => Array.from({ length: 4 }, (_, i) => (tone ? toneFrame(i, 0.3).subarray(0, 480) : new Int16Array(480)));

// The audio source drains in real time while the test fills it, and a loaded machine captures
// slower: how much is still queued when a check reads it varies. So each check holds whatever was
// queued at that moment (read just before), and the sink's decisions are checked by what it drops.
const SOURCE_MS = 1000;

/** Runs `speechStarting` and says what was queued just before and just after, and how long it took. */
async function aroundSpeechStart(sink: LiveKitMediaSink): Promise<{ before: number; after: number; tookMs: number }> {
  const before = sink.audioAheadMs;
  const t0 = performance.now();
  await sink.speechStarting();
  return { before, after: sink.audioAheadMs, tookMs: performance.now() - t0 };
}

test('with a speech lead, the idle silence queued ahead of a turn is dropped down to the lead when its speech starts', async (t) => {
  const sink = new LiveKitMediaSink(() => undefined, { audioQueueMs: SOURCE_MS, speechLeadMs: 20 });
  for (let i = 0; i < 15; i++) await sink.deliver(null, chunks40(false)); // 600 ms of idle silence, faster than real time
  const { before, after } = await aroundSpeechStart(sink);
  t.log(`queued ${before} ms before, ${after} after; dropped ${sink.droppedSilenceMs}`);
  t.true(after <= 20, `${after} ms queued after: the lead at most`);
  // All of it but the lead (whatever drained meanwhile was not there to drop).
  t.true(before <= 20 || (sink.droppedSilenceMs >= before - 20 - 10 && sink.droppedSilenceMs <= before), `dropped ${sink.droppedSilenceMs} of ${before} ms`);
  await sink.deliver(null, chunks40(true));
  t.true(sink.audioAheadMs > 0 && sink.audioAheadMs <= 60, `${sink.audioAheadMs} ms: the speech right behind the lead`);
  await sink.close();
});

test('queued sound is never dropped: the end of a turn before still plays whole, and without a lead nothing is dropped', async (t) => {
  // Sound, then a pause after it: the sink drops nothing while sound may still be queued.
  const sink = new LiveKitMediaSink(() => undefined, { audioQueueMs: SOURCE_MS, speechLeadMs: 20 });
  for (let i = 0; i < 11; i++) await sink.deliver(null, chunks40(true));
  await sink.deliver(null, chunks40(false));
  await sink.deliver(null, [toneFrame(0, 0.3).subarray(0, 480)]); // the queue ends in sound: never all silence
  const kept = await aroundSpeechStart(sink);
  t.is(sink.droppedSilenceMs, 0);
  // A drop leaves the 20 ms lead at most: more than that is still there, unless it drained anyway.
  t.true(kept.after > 20 || kept.before - kept.tookMs <= 30, `${kept.after} of ${kept.before} ms still queued`);
  await sink.close();

  const keeping = new LiveKitMediaSink(() => undefined, { audioQueueMs: SOURCE_MS });
  for (let i = 0; i < 15; i++) await keeping.deliver(null, chunks40(false));
  const noLead = await aroundSpeechStart(keeping);
  t.is(keeping.droppedSilenceMs, 0);
  t.true(noLead.after > 20 || noLead.before - noLead.tookMs <= 30, `${noLead.after} of ${noLead.before} ms still queued`);
  await keeping.close();
});

test('a clear drops the queued sound: nothing is queued after it, and it says how much it dropped', async (t) => {
  const sink = new LiveKitMediaSink(() => undefined, { audioQueueMs: SOURCE_MS, speechLeadMs: 20 });
  for (let i = 0; i < 5; i++) await sink.deliver(null, chunks40(true)); // 200 ms of speech, faster than real time
  const before = sink.audioAheadMs;
  const dropped = sink.clearAudio();
  t.true(before > 0 && dropped > 0 && dropped <= before, `dropped ${dropped} of ${before} ms`);
  t.is(sink.audioAheadMs, 0, 'nothing queued after a clear');
  await sink.close();
});

/** Delivers `ms` of silence (40 ms per delivery) at once. */
async function fill(sink: LiveKitMediaSink, ms: number): Promise<void> {
  for (let i = 0; i < ms / 40; i++) await sink.deliver(null, chunks40(false));
}

async function syntheticPicture(): Promise<Awaited<ReturnType<typeof imageToI420>>> {
  const [jpeg] = await renderSyntheticPictures(160, 120, 1);
  return imageToI420({ width: 160, height: 120, format: 'jpeg', data: jpeg! });
}

// The sink's timing (its estimate of the audio queued ahead, when a held picture goes, what is an
// underrun) runs on its clock: on a virtual one these tests are exact whatever the machine's load.
// The real audio source still drains in real time; nothing here reads it.

test('with a picture lag, a picture waits for its own sound: sent when the audio queued ahead of it has been sent, plus the lag', async (t) => {
  const clock = new VirtualClock(1000);
  const sink = new LiveKitMediaSink(() => undefined, { audioQueueMs: SOURCE_MS, pictureLagMs: 5, clock });
  const picture = await syntheticPicture();
  await fill(sink, 200);
  await sink.deliver(picture, chunks40(true)); // its sound is sent after the 200 ms ahead of it
  await clock.advance(100);
  await sink.deliver(picture, chunks40(true)); // 100 ms later: behind 140 ms (200 + 40 - 100)
  t.is(sink.heldPictures, 2);
  await clock.advance(104);
  t.is(sink.heldPictures, 2, 'not before its sound and the lag (205 ms)');
  t.is(sink.stats.lastPictureLeadMs, null);
  await clock.advance(1);
  t.is(sink.heldPictures, 1);
  t.is(sink.stats.lastPictureLeadMs, -5, 'sent 5 ms after its sound');
  await clock.advance(40);
  t.is(sink.heldPictures, 0, 'the second at 100 + 140 + 5');
  t.is(sink.stats.lastPictureLeadMs, -5);
  t.deepEqual([sink.stats.picturesHeld, sink.stats.picturesForced, sink.stats.picturesDropped], [2, 0, 0]);
  // Nothing queued ahead (the audio has all been sent by now) and no lag: sent at once.
  const prompt = new LiveKitMediaSink(() => undefined, { audioQueueMs: SOURCE_MS, pictureLagMs: 0, clock });
  await prompt.deliver(picture, chunks40(true));
  t.is(prompt.heldPictures, 0);
  t.is(prompt.stats.lastPictureLeadMs, 0);
  await Promise.all([sink.close(), prompt.close()]);
});

test('held pictures keep their order and are bounded: beyond the bound the oldest goes at once', async (t) => {
  const clock = new VirtualClock();
  const sink = new LiveKitMediaSink(() => undefined, { audioQueueMs: SOURCE_MS, pictureLagMs: 0, clock });
  const picture = await syntheticPicture();
  await fill(sink, 800);
  for (let i = 0; i < LIVEKIT_MEDIA_DEFAULTS.maxHeldPictures + 2; i++) await sink.deliver(picture, []);
  t.is(sink.heldPictures, LIVEKIT_MEDIA_DEFAULTS.maxHeldPictures);
  t.is(sink.stats.picturesForced, 2);
  t.is(sink.stats.lastPictureLeadMs, 800, 'the forced one went 800 ms before its sound');
  await clock.advance(800);
  t.is(sink.heldPictures, 0, 'all due at the same time, sent together');
  await sink.close();
});

test('without a picture lag, a picture is sent at once; its lead is the audio queued ahead of it', async (t) => {
  const clock = new VirtualClock();
  const sink = new LiveKitMediaSink(() => undefined, { audioQueueMs: SOURCE_MS, clock });
  await fill(sink, 400);
  await clock.advance(30);
  await sink.deliver(await syntheticPicture(), chunks40(true));
  t.is(sink.heldPictures, 0);
  t.is(sink.stats.picturesHeld, 0);
  t.is(sink.stats.lastPictureLeadMs, 370);
  await sink.close();
});

test('a speech start that drops queued silence brings the pictures held for it that much sooner', async (t) => {
  const clock = new VirtualClock();
  const sink = new LiveKitMediaSink(() => undefined, { audioQueueMs: SOURCE_MS, speechLeadMs: 20, pictureLagMs: 0, clock });
  const picture = await syntheticPicture();
  await fill(sink, 200);
  await sink.deliver(picture, chunks40(false)); // an idle picture, its sound behind 200 ms of silence
  await fill(sink, 200);
  await clock.advance(10);
  t.is(sink.heldPictures, 1);
  await sink.speechStarting(); // 430 ms of silence queued: dropped down to the 20 ms lead
  t.is(sink.droppedSilenceMs, 410);
  // Its sound was due at 200: now 410 ms sooner, i.e. past. Without the drop it would wait until 200.
  await clock.advance(0);
  t.is(sink.heldPictures, 0);
  t.is(sink.stats.lastPictureLeadMs, -220);
  await sink.close();
});

test('a clear drops the pictures held for the sound it drops; closing drops the rest, and nothing is sent after', async (t) => {
  const clock = new VirtualClock();
  const sink = new LiveKitMediaSink(() => undefined, { audioQueueMs: SOURCE_MS, pictureLagMs: 0, clock });
  const picture = await syntheticPicture();
  await fill(sink, 400);
  await sink.deliver(picture, chunks40(true));
  await sink.deliver(picture, chunks40(true));
  t.is(sink.heldPictures, 2);
  sink.clearAudio();
  t.is(sink.heldPictures, 0);
  t.is(sink.stats.picturesDropped, 2);
  await fill(sink, 400);
  await sink.deliver(picture, chunks40(true));
  t.is(sink.heldPictures, 1, 'timed after the new audio');
  await sink.close();
  t.is(sink.heldPictures, 0);
  t.is(clock.pendingTimers(), 0, 'no timer left');
  await clock.advance(1000);
  t.is(sink.stats.lastPictureLeadMs, null, 'never sent');
});

test('the sink counts the times its audio ran dry between deliveries, and how long: not while it is fed ahead, not after a clear', async (t) => {
  const clock = new VirtualClock();
  const sink = new LiveKitMediaSink(() => undefined, { audioQueueMs: SOURCE_MS, clock });
  await fill(sink, 200);
  await clock.advance(150);
  await fill(sink, 40); // 50 ms still ahead
  await clock.advance(90);
  await fill(sink, 40); // exactly at the end of what was sent: no gap
  await clock.advance(40 + LIVEKIT_MEDIA_DEFAULTS.underrunToleranceMs);
  await fill(sink, 40); // within the estimate's tolerance
  t.is(sink.stats.underruns, 0);
  await clock.advance(150);
  await fill(sink, 40);
  t.is(sink.stats.underruns, 1);
  t.is(sink.stats.underrunMs, 110, 'dry from the end of the 40 ms to the next, 150 ms later');
  sink.clearAudio();
  await clock.advance(60);
  await fill(sink, 40);
  t.is(sink.stats.underruns, 1, 'a cleared queue is empty on purpose');
  await sink.close();
});

test('a LiveKit server that cannot be reached is a publish_failed RoomError', async (t) => {
  const refusing = createServer((_req, res) => res.writeHead(401).end('unauthorized'));
  await new Promise<void>((resolve) => refusing.listen(0, '127.0.0.1', resolve));
  const { port } = refusing.address() as AddressInfo;
  const error = await t.throwsAsync(publishAvatar(NEVER, { provider: 'livekit', url: `ws://127.0.0.1:${port}`, token: 'not-a-jwt' }, { livekitAllowedRanges: ['127.0.0.1/32'] }), { instanceOf: RoomError });
  t.is(error!.code, 'publish_failed');
  refusing.close();
  await t.throwsAsync(publishAvatar(NEVER, { provider: 'livekit', url: 'http://example.invalid', token: 'x' }), { instanceOf: RoomError, message: /ws:\/\/ or wss:\/\// });
});

test('settings are checked before anything connects', async (t) => {
  const bad: unknown[] = [null, {}, { provider: 'zoom' }, { provider: 'embedded', room: '', token: 't' }, { provider: 'livekit', url: 'wss://x' }];
  for (const settings of bad) {
    await t.throwsAsync(publishAvatar(NEVER, settings as never), { instanceOf: RoomError, message: /webrtc/ });
  }
  await t.throwsAsync(publishAvatar(NEVER, { provider: 'embedded', room: 'r', token: 't' }), { instanceOf: RoomError, message: /no embedded room provider/ });
});
