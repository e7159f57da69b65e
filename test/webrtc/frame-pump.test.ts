/**
 * The frame pump: in-order delivery of picture + audio per face frame, pictures (never audio)
 * skipped under a backlog, undecodable pictures survived, and a clean end.
 */
import test from 'ava';
import { Subject, from, throwError, concat } from 'rxjs';
import { AvatarFramePump, type AvatarMediaSink, type I420Frame } from '../../transports/webrtc/index.ts';
import type { FaceFrame } from '../../processors/avatar/face-model.ts';
import { renderSyntheticPictures, toneFrame } from './synthetic-face.ts';

function frame(index: number, jpeg: Uint8Array, width = 64, height = 48): FaceFrame {
  return { index, ptsMs: index * 40, type: 'speech', final: false, turnId: 1, image: { width, height, format: 'jpeg', data: jpeg }, audio: toneFrame(index, 0.2) };
}

class RecordingSink implements AvatarMediaSink {
  readonly deliveries: { video: I420Frame | null; audio: number }[] = [];
  private waiters: { count: number; resolve: () => void }[] = [];
  deliver(video: I420Frame | null, audio: readonly Int16Array[]): void {
    this.deliveries.push({ video, audio: audio.length });
    this.waiters = this.waiters.filter((w) => (this.deliveries.length >= w.count ? (w.resolve(), false) : true));
  }
  /** Resolves once `count` frames were delivered. */
  delivered(count: number): Promise<void> {
    return this.deliveries.length >= count ? Promise.resolve() : new Promise((resolve) => this.waiters.push({ count, resolve }));
  }
}

/**
 * Feeds frames one at a time, each after the previous one was delivered: no backlog can form
 * however slow the machine is, so what these tests check does not depend on its speed (the
 * backlog rules have their own tests, with bursts the test makes on purpose).
 */
async function feedInStep(subject: Subject<FaceFrame>, sink: RecordingSink, frames: FaceFrame[]): Promise<void> {
  for (const [i, f] of frames.entries()) {
    subject.next(f);
    await sink.delivered(i + 1);
  }
  subject.complete();
}

test('frames paced like a session arrive in order, each with its picture and four audio chunks', async (t) => {
  const [jpeg] = await renderSyntheticPictures(64, 48, 1);
  const subject = new Subject<FaceFrame>();
  const sink = new RecordingSink();
  const pump = new AvatarFramePump(subject, sink);
  pump.start();
  await feedInStep(subject, sink, Array.from({ length: 10 }, (_, i) => frame(i, jpeg!)));
  t.deepEqual(await pump.done, {});
  const perFrame = sink.deliveries.slice(0, 10);
  t.true(perFrame.every((d) => d.video?.width === 64 && d.video.height === 48), JSON.stringify(pump.stats));
  t.true(perFrame.every((d) => d.audio === 4));
  t.is(pump.stats.videoFrames, 10);
  t.is(pump.stats.audioChunks, 40 + sink.deliveries[10]!.audio);
  t.is(sink.deliveries[10]!.video, null, 'the tail carries only audio');
});

test('a backlog skips pictures but never audio', async (t) => {
  const [jpeg] = await renderSyntheticPictures(320, 240, 1);
  const sink = new RecordingSink();
  const frames = Array.from({ length: 30 }, (_, i) => frame(i, jpeg!, 320, 240));
  const pump = new AvatarFramePump(from(frames), sink, { maxQueuedFrames: 3 });
  pump.start();
  await pump.done;
  t.is(pump.stats.frames, 30);
  t.true(pump.stats.skippedVideoFrames > 0, 'a burst of 30 frames is a backlog');
  t.is(pump.stats.videoFrames + pump.stats.skippedVideoFrames, 30);
  t.is(sink.deliveries.slice(0, 30).reduce((a, d) => a + d.audio, 0), 120, 'every frame delivered its 40 ms of audio');
  t.truthy(sink.deliveries[29]!.video ?? sink.deliveries[28]!.video, 'the newest pictures are shown');
});

test('frames that wait because the sink holds audio ahead of playout keep their pictures; once its audio runs low, the backlog skips pictures again', async (t) => {
  const [jpeg] = await renderSyntheticPictures(64, 48, 1);
  // A sink like LiveKit's: it takes audio at real time and reports what it holds ahead of playout.
  class PacingSink extends RecordingSink {
    audioAheadMs = 200;
  }
  const sink = new PacingSink();
  const subject = new Subject<FaceFrame>();
  const pump = new AvatarFramePump(subject, sink, { maxQueuedFrames: 3 });
  pump.start();
  // A stall of the machine: 12 frames arrive at once, then (sink and session both at real time) one per delivery.
  for (let i = 0; i < 12; i++) subject.next(frame(i, jpeg!));
  for (let i = 12; i < 30; i++) {
    await sink.delivered(i - 11);
    subject.next(frame(i, jpeg!));
  }
  await sink.delivered(19);
  t.is(pump.stats.skippedVideoFrames, 0, 'the standing backlog is the sink\'s pacing: skipping would not bring the sound sooner');
  t.true(sink.deliveries.slice(0, 19).every((d) => d.video !== null && d.audio === 4));
  sink.audioAheadMs = 0; // the sink ran dry: now the waiting frames are late
  await sink.delivered(21);
  subject.complete();
  await pump.done;
  t.true(pump.stats.skippedVideoFrames > 0, JSON.stringify(pump.stats));
  t.is(pump.stats.videoFrames + pump.stats.skippedVideoFrames, 30);
  t.is(sink.deliveries.slice(0, 30).reduce((a, d) => a + d.audio, 0), 120, 'every frame delivered its audio');
});

test('an undecodable picture loses only that picture', async (t) => {
  const [jpeg] = await renderSyntheticPictures(64, 48, 1);
  const warnings: string[] = [];
  const sink = new RecordingSink();
  const frames = [frame(0, jpeg!), frame(1, new Uint8Array([1, 2, 3])), frame(2, jpeg!)];
  const subject = new Subject<FaceFrame>();
  const pump = new AvatarFramePump(subject, sink, { onWarning: (m) => warnings.push(m) });
  pump.start();
  await feedInStep(subject, sink, frames);
  await pump.done;
  t.is(pump.stats.badImages, 1);
  t.is(pump.stats.videoFrames, 2);
  t.deepEqual(sink.deliveries.slice(0, 3).map((d) => [d.video !== null, d.audio]), [[true, 4], [false, 4], [true, 4]]);
  t.true(warnings[0]!.includes('frame 1'));
});

test('a failing stream ends the pump with its error; stop() ends it at once', async (t) => {
  const [jpeg] = await renderSyntheticPictures(64, 48, 1);
  const failing = new AvatarFramePump(concat(from([frame(0, jpeg!)]), throwError(() => new Error('renderer died'))), new RecordingSink());
  failing.start();
  const result = await failing.done;
  t.is((result.error as Error).message, 'renderer died');

  const subject = new Subject<FaceFrame>();
  const pump = new AvatarFramePump(subject, new RecordingSink());
  pump.start();
  pump.stop();
  t.deepEqual(await pump.done, {});
  t.false(subject.observed, 'the pump unsubscribed');
});

test('videoDelayFrames sends each picture that many frames after its audio, and flushes the held pictures at the end', async (t) => {
  const pictures = await renderSyntheticPictures(64, 48, 6); // the bar moves: each picture differs
  const subject = new Subject<FaceFrame>();
  const sink = new RecordingSink();
  const pump = new AvatarFramePump(subject, sink, { videoDelayFrames: 2 });
  pump.start();
  await feedInStep(subject, sink, pictures.map((p, i) => frame(i, p)));
  await pump.done;
  const direct = new RecordingSink();
  const reference = new AvatarFramePump(from(pictures.map((p, i) => frame(i, p))), direct, { maxQueuedFrames: 100 });
  reference.start();
  await reference.done;
  const same = (a: I420Frame | null, b: I420Frame | null) => a !== null && b !== null && Buffer.compare(a.data, b.data) === 0;
  t.deepEqual(sink.deliveries.slice(0, 6).map((d) => d.audio), [4, 4, 4, 4, 4, 4], 'audio is never held back');
  t.is(sink.deliveries[0]!.video, null);
  t.is(sink.deliveries[1]!.video, null);
  for (let i = 2; i < 6; i++) t.true(same(sink.deliveries[i]!.video, direct.deliveries[i - 2]!.video), `frame ${i} carries picture ${i - 2}`);
  t.true(same(sink.deliveries[6]!.video, direct.deliveries[4]!.video), 'the tail carries picture 4');
  t.true(same(sink.deliveries[7]!.video, direct.deliveries[5]!.video));
  t.is(sink.deliveries[7]!.audio, 0);
  t.is(pump.stats.videoFrames, 6);
});

test('a speech-start frame tells the sink before its audio is delivered, once per turn', async (t) => {
  const [jpeg] = await renderSyntheticPictures(64, 48, 1);
  const subject = new Subject<FaceFrame>();
  const events: string[] = [];
  const sink = new (class extends RecordingSink {
    override deliver(video: I420Frame | null, audio: readonly Int16Array[]): void {
      events.push(`deliver ${audio.length}`);
      super.deliver(video, audio);
    }
    async speechStarting(): Promise<void> {
      events.push('speech');
      await new Promise((resolve) => setImmediate(resolve)); // a sink that takes its time: the audio still waits for it
    }
  })();
  const pump = new AvatarFramePump(subject, sink);
  pump.start();
  const typed = (i: number, type: FaceFrame['type']): FaceFrame => ({ ...frame(i, jpeg!), type });
  await feedInStep(subject, sink, [typed(0, 'idle'), typed(1, 'speech-start'), typed(2, 'speech'), typed(3, 'fade-out'), typed(4, 'idle'), typed(5, 'speech-start')]);
  await pump.done;
  t.deepEqual(events.slice(0, 8), ['deliver 4', 'speech', 'deliver 4', 'deliver 4', 'deliver 4', 'deliver 4', 'speech', 'deliver 4']);
});
