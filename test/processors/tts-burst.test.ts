/**
 * A TTS faster than real time (eSpeak: the rest of a sentence is queued by the time its first
 * audio is read) must not hold the event loop while its audio goes down the pipeline: the face
 * after it emits its frames from timers, and the frame that starts the answer is due while the
 * sentence's chunks are still being handed on. Real clock and real timers: a timer set when the
 * first chunk arrives must run before the last one does.
 */
import test from 'ava';
import { frame, PipelineWorker, RealClock, type Frame } from '../../core/index.ts';
import { FrameProcessor } from '../../core/processor.ts';
import type { TTSEvent, TTSRequest, TTSService } from '../../processors/services.ts';
import { TTSProcessor } from '../../processors/tts/tts-processor.ts';

const RATE = 16_000;

/** All of a sentence's audio at once: ten 100 ms pieces, none of them waiting for anything. */
class BurstTTS implements TTSService {
  readonly name = 'burst-tts';
  async *synthesize(request: TTSRequest): AsyncIterable<TTSEvent> {
    for (let i = 0; i < 10; i++) yield { type: 'audio', pcm: new Int16Array(request.sampleRate / 10).fill(1000), sampleRate: request.sampleRate };
  }
}

/** Counts the TTS's chunks; at the first, sets a timer and notes how many had come when it ran. */
class Listener extends FrameProcessor {
  chunks = 0;
  chunksWhenTimerRan: number | undefined;
  protected override process(f: Frame, direction: 'downstream' | 'upstream'): void {
    if (f.type === 'tts-audio' && f.pcm.length > 0 && ++this.chunks === 1) {
      setTimeout(() => (this.chunksWhenTimerRan = this.chunks), 0);
      // The timer is due 1 ms from now. On a fast machine the whole sentence went down in less
      // than that (local CI run H: "the timer ran after 50 of 50 chunks" although the TTS had
      // yielded nine times), so the timer was not due yet at any of those turns of the loop. Make it
      // due before the first piece has gone: the test is whether the loop gets a turn, not how fast.
      const dueAt = performance.now() + 2;
      while (performance.now() < dueAt);
    }
    this.push(f, direction);
  }
}

test('TTS: a sentence synthesised at once goes down in pieces with the event loop free between them (a timer due meanwhile runs before the last chunk)', async (t) => {
  const listener = new Listener();
  const tts = new TTSProcessor(new BurstTTS(), { holdAudioForWordTimings: false });
  const worker = new PipelineWorker([tts, listener], { clock: new RealClock(), audioInSampleRate: RATE, audioOutSampleRate: RATE, heartbeatMs: null, idleTimeoutMs: null });
  void worker.run();
  worker.queueFrame(frame('tts-speak', { text: 'A whole sentence at once.' }));
  const until = Date.now() + 5000;
  while ((listener.chunks < 50 || listener.chunksWhenTimerRan === undefined) && Date.now() < until) await new Promise((r) => setTimeout(r, 5));
  t.is(listener.chunks, 50, 'every 20 ms chunk of the 1 s of audio');
  t.not(listener.chunksWhenTimerRan, undefined);
  t.true(listener.chunksWhenTimerRan! < 50, `the timer ran after ${listener.chunksWhenTimerRan} of 50 chunks`);
  t.true(listener.chunksWhenTimerRan! <= 10, `at most the first two pieces before the timer: ${listener.chunksWhenTimerRan}`);
  await worker.cancel();
});
