/**
 * RoomAudioInput: a room's microphone audio (10 ms chunks at the rate wrtc hands over) becomes
 * `input-audio` frames at the pipeline's rate, from one participant. The room side is fed with
 * the same chunk shapes wrtc delivers; the media path itself is covered end to end in
 * test/agent/bot-runner.test.ts.
 */
import test from 'ava';
import { Subject } from 'rxjs';
import { Pipeline, PipelineWorker, VirtualClock, type FrameOf } from '../../core/index.ts';
import { CaptureProcessor } from '../../core/testing/index.ts';
import { RoomAudioInput, type ParticipantAudio, type RoomSubscriberEvent } from '../../transports/webrtc/index.ts';

function tone(start: number, samples: number, rate: number, hz = 440): Int16Array {
  const out = new Int16Array(samples);
  for (let i = 0; i < samples; i++) out[i] = Math.round(8000 * Math.sin((2 * Math.PI * hz * (start + i)) / rate));
  return out;
}

async function harness(options: ConstructorParameters<typeof RoomAudioInput>[1] = {}, audioInSampleRate = 16_000) {
  const audio = new Subject<ParticipantAudio>();
  const events = new Subject<RoomSubscriberEvent>();
  const input = new RoomAudioInput({ participantAudio: audio, subscriberEvents: events }, options);
  const capture = new CaptureProcessor('downstream', new Set(['start', 'end', 'heartbeat']));
  const clock = new VirtualClock();
  const worker = new PipelineWorker(new Pipeline([input, capture]), { clock, audioInSampleRate, heartbeatMs: null, idleTimeoutMs: null });
  const run = worker.run();
  await clock.advance(0);
  const frames = () => capture.frames.filter((f): f is FrameOf<'input-audio'> => f.type === 'input-audio');
  const send = (participantId: string, chunks: number, rate = 16_000, channels = 1) => {
    const n = rate / 100;
    for (let i = 0; i < chunks; i++) {
      const mono = tone(i * n, n, rate);
      const samples = channels === 1 ? mono : Int16Array.from({ length: n * channels }, (_, k) => mono[Math.floor(k / channels)]!);
      audio.next({ participantId, samples, sampleRate: rate, channels });
    }
  };
  return { audio, events, input, worker, run, clock, frames, send };
}

test('by default each 10 ms chunk becomes a frame at once (the VAD hears the end of speech without waiting for a second chunk)', async (t) => {
  const h = await harness();
  h.send('sub_a', 1);
  t.is(h.frames().length, 1);
  t.is(h.frames()[0]!.pcm.length, 160);
  h.send('sub_a', 3);
  t.is(h.frames().length, 4);
  await h.worker.cancel();
});

test('audio is resampled to the pipeline rate and re-chunked to frames of chunkMs (20 ms here)', async (t) => {
  const h = await harness({ chunkMs: 20 }, 24_000);
  h.send('sub_a', 100); // one second at 16 kHz
  const frames = h.frames();
  t.true(frames.length >= 48 && frames.length <= 50, `${frames.length} frames`);
  t.true(frames.every((f) => f.sampleRate === 24_000 && f.channels === 1 && f.pcm.length === 480));
  const all = frames.flatMap((f) => [...f.pcm]).slice(480); // past the filter onset
  let crossings = 0;
  for (let i = 1; i < all.length; i++) if (all[i - 1]! < 0 && all[i]! >= 0) crossings++;
  const hz = crossings / (all.length / 24_000);
  t.true(Math.abs(hz - 440) < 5, `pitch ${hz} Hz`);
  t.is(h.input.participantId, 'sub_a');
  t.is(h.input.stats.frames, frames.length);
  await h.worker.cancel();
});

test('it follows the first participant heard, drops the others, and the next one after a departure', async (t) => {
  const h = await harness();
  h.send('sub_a', 10);
  h.send('sub_b', 10);
  t.is(h.frames().length, 10);
  t.is(h.input.stats.otherParticipantChunks, 10);
  h.events.next({ type: 'left', participantId: 'sub_b', reason: 'left' });
  t.is(h.input.participantId, 'sub_a', 'another participant leaving changes nothing');
  h.events.next({ type: 'left', participantId: 'sub_a', reason: 'disconnected' });
  t.is(h.input.participantId, null);
  h.send('sub_c', 10, 48_000, 2); // a reconnected visitor, stereo at 48 kHz: mixed down and resampled
  t.is(h.input.participantId, 'sub_c');
  t.true(h.frames().length >= 19, `${h.frames().length - 10} frames of 100 ms (less the resampler's delay)`);
  t.true(h.frames().slice(10).every((f) => f.pcm.length === 160 && f.sampleRate === 16_000));
  await h.worker.cancel();
});

test('a chosen participant only; nothing before the start or after the end', async (t) => {
  const h = await harness({ participantId: 'sub_b' });
  h.send('sub_a', 4);
  h.send('sub_b', 4);
  t.is(h.frames().length, 4);
  h.events.next({ type: 'left', participantId: 'sub_b', reason: 'left' });
  h.send('sub_a', 4);
  t.is(h.frames().length, 4, 'a fixed participant is not replaced');
  void h.worker.end();
  await h.clock.advanceUntil(() => h.worker.finished, 1000);
  t.false(h.audio.observed, 'unsubscribed at the end');
  t.false(h.events.observed);

  const audio = new Subject<ParticipantAudio>();
  const idle = new RoomAudioInput({ participantAudio: audio, subscriberEvents: new Subject<RoomSubscriberEvent>() });
  t.false(audio.observed, 'nothing is subscribed before the pipeline starts');
  t.is(idle.participantId, null);
});
