/**
 * Words as played through the avatar: the real TTS processor, avatar processor (the in-process
 * human-portrait face), output transport and assistant aggregator on the virtual clock. A TTS
 * makes a turn's audio far faster than real time; the words must still come out of the output
 * (`tts-text`) only when the face frames carrying their first sample are written, an
 * interruption must leave exactly the words heard (in the transcript and the model's context),
 * and an uninterrupted turn must be complete.
 */
import test from 'ava';
import { frame, Pipeline, PipelineWorker, Registry, VirtualClock, type Frame, type WordTiming } from '../../core/index.ts';
import { RecordingObserver } from '../../core/observer.ts';
import { AvatarProcessor } from '../../processors/avatar/avatar-processor.ts';
import type { FaceModel } from '../../processors/avatar/face-model.ts';
import { AssistantTurnAggregator } from '../../processors/aggregators/assistant-aggregator.ts';
import { LLMContext } from '../../processors/llm/context.ts';
import { TTSProcessor } from '../../processors/tts/tts-processor.ts';
import { MemoryMediaSink } from '../../transports/media-sink.ts';
import { OutputTransport } from '../../transports/output-transport.ts';
import { facePlugin } from '../../plugins/face/index.ts';
import type { TTSEvent, TTSRequest, TTSService } from '../../processors/services.ts';
import { speech, ToneTTS } from './scripted-services.ts';

const face = new Registry().use(facePlugin).create<FaceModel>('face', 'human-portrait');
const RATE = 16_000;

/** A provider without word timings streaming its audio a little faster than real time. */
class PacedTTS implements TTSService {
  readonly name = 'paced-tts';
  /** Clock time of the last audio it produced. */
  lastAudioAt = 0;
  constructor(private readonly clock: VirtualClock, private readonly chunkMs = 100, private readonly everyMs = 50) {}
  async *synthesize(request: TTSRequest): AsyncIterable<TTSEvent> {
    const chunks = request.text.split(/\s+/).length;
    for (let i = 0; i < chunks; i++) {
      await this.clock.sleep(this.everyMs, request.signal);
      this.lastAudioAt = this.clock.now();
      yield { type: 'audio', pcm: speech(this.chunkMs, request.sampleRate), sampleRate: request.sampleRate };
    }
  }
}

async function session(options: { readonly tts?: boolean; readonly service?: (clock: VirtualClock) => TTSService; readonly hold?: boolean } = {}) {
  const clock = new VirtualClock();
  const sink = new MemoryMediaSink();
  const context = new LLMContext({ systemPrompt: 'test' });
  const avatar = new AvatarProcessor((c) => face.openSession({ configuration: { width: 256, height: 144 }, imageFormat: 'rgb' }, c));
  const output = new OutputTransport(sink, { sampleRate: RATE });
  const assistant = new AssistantTurnAggregator(context);
  const observer = new RecordingObserver();
  const service = options.service?.(clock) ?? new ToneTTS(clock, 30);
  const tts = new TTSProcessor(service, { sampleRate: RATE, ...(options.hold === undefined ? {} : { holdAudioForWordTimings: options.hold }) });
  const chain = options.tts === false ? [avatar, output, assistant] : [tts, avatar, output, assistant];
  const worker = new PipelineWorker(new Pipeline(chain), { clock, audioOutSampleRate: RATE, heartbeatMs: null, idleTimeoutMs: null, observers: [observer] });
  void worker.run();
  // Opening the face (decoding its picture, its landmarks) takes real time, not clock time:
  // the pipeline is up when the face's idle frames reach the output.
  const until = Date.now() + 30_000;
  while (sink.images.length === 0 && Date.now() < until) {
    await clock.advance(40);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  if (sink.images.length === 0) throw new Error('the pipeline did not start within 30 s');
  /** Words the output reported as played, with the clock time of each report. */
  const played = () =>
    observer.events
      .filter((e) => e.source === output.name && e.direction === 'downstream' && e.frame.type === 'tts-text')
      .flatMap((e) => (e.frame.type === 'tts-text' ? e.frame.text.split(/\s+/).filter(Boolean).map((word) => ({ word, at: e.timestampMs })) : []));
  /** The audio the output wrote, in order, with the clock time it was written at. */
  const written = () => sink.audio.map((a) => a.pcm);
  return { clock, sink, context, avatar, output, worker, observer, played, written, service, tts };
}

/** Milliseconds of the turn's audio that were written: up to the last non-silent sample written. */
function heardMs(chunks: readonly Int16Array[]): number {
  let total = 0;
  let lastLoud = 0;
  for (const c of chunks) {
    for (let i = 0; i < c.length; i++) if (c[i] !== 0) lastLoud = total + i + 1;
    total += c.length;
  }
  return (lastLoud / RATE) * 1000;
}

const words = (n: number) => Array.from({ length: n }, (_, i) => `w${i}`);

test('an interrupted turn reports exactly the words whose audio was played, and the context keeps only them', async (t) => {
  const s = await session();
  t.teardown(() => s.worker.cancel());
  const text = words(30); // ToneTTS: 60 ms per word, 1.8 s in all, made in one burst
  s.worker.queueFrame(frame('tts-speak', { text: text.join(' ') }));
  await s.clock.advanceUntil(() => s.output.botSpeaking, 2000);
  t.true(s.output.botSpeaking);
  // The TTS made the whole turn long ago; the face has played only the start of it.
  await s.clock.advance(700);
  t.true(s.played().length < text.length / 2, `only the words played so far: ${s.played().length}`);
  s.worker.interrupt();
  await s.clock.advance(500);
  const heard = heardMs(s.written());
  const said = s.played().map((w) => w.word);
  t.true(heard > 500 && heard < 1000, `heard ${heard} ms`);
  // Each word starts at i * 60 ms of the turn's audio. Every word whose start was written was
  // reported; no word starting later than the frame (40 ms) that was being written.
  const startedBefore = (ms: number) => text.filter((_, i) => i * ToneTTS.MS_PER_WORD < ms);
  t.deepEqual(said.slice(0, startedBefore(heard).length), startedBefore(heard));
  t.true(said.length <= startedBefore(heard + 40).length, `${said.length} words for ${heard} ms heard`);
  t.deepEqual(said, text.slice(0, said.length), 'a prefix, in order');
  t.true(said.length < text.length);
  // The model's memory of its turn is the same prefix.
  const assistant = s.context.messages().filter((m) => m.role === 'assistant');
  t.deepEqual(assistant.map((m) => m.content), [said.join(' ')]);
  // Nothing more is reported after the cut.
  await s.clock.advance(2000);
  t.is(s.played().length, said.length);
  await s.worker.cancel();
});

test('an uninterrupted turn reports every word, each once its first sample has been written', async (t) => {
  const s = await session();
  t.teardown(() => s.worker.cancel());
  const text = words(20);
  s.worker.queueFrame(frame('tts-speak', { text: text.join(' ') }));
  await s.clock.advanceUntil(() => s.output.botSpeaking, 2000);
  const startedAt = s.clock.now();
  await s.clock.advanceUntil(() => !s.output.botSpeaking, 5000);
  t.deepEqual(s.played().map((w) => w.word), text);
  // Word i starts i * 60 ms into the turn's audio; the output writes at real time from the
  // first chunk, so it cannot be reported before then (and not a frame later than it plays).
  for (const [i, w] of s.played().entries()) {
    const due = startedAt + i * ToneTTS.MS_PER_WORD;
    t.true(w.at >= due - 40 && w.at <= due + 80, `${w.word} reported at ${w.at - startedAt} ms, starts at ${i * ToneTTS.MS_PER_WORD} ms`);
  }
  t.deepEqual(s.context.messages().filter((m) => m.role === 'assistant').map((m) => m.content), [text.join(' ')]);
  await s.worker.cancel();
});

test('words without timings are spread over their chunk; a face that ran dry plays no words', async (t) => {
  const s = await session({ tts: false });
  t.teardown(() => s.worker.cancel());
  const untimed = (list: string[]): WordTiming[] => list.map((word) => ({ word, startMs: Number.NaN, endMs: Number.NaN }));
  s.worker.queueFrame(frame('tts-started', {}));
  // 400 ms with four untimed words: at 0, 100, 200, 300 ms.
  s.worker.queueFrame(frame('tts-audio', { pcm: speech(400), sampleRate: RATE, channels: 1, words: untimed(['a', 'b', 'c', 'd']) }));
  await s.clock.advanceUntil(() => s.output.botSpeaking, 1000);
  const startedAt = s.clock.now();
  // The TTS is slow: nothing more for a second, the face runs dry (silent speech frames).
  await s.clock.advance(1000);
  t.deepEqual(s.played().map((w) => w.word), ['a', 'b', 'c', 'd']);
  const at = (word: string) => s.played().find((w) => w.word === word)!.at - startedAt;
  for (const [word, ms] of [['b', 100], ['c', 200], ['d', 300]] as const) t.true(at(word) >= ms - 40 && at(word) <= ms + 40, `${word} at ${at(word)} ms`);
  const resumedAt = s.clock.now();
  // Timed words of the next chunk, relative to it: 'e' at 0, 'f' at 150 ms.
  s.worker.queueFrame(frame('tts-audio', { pcm: speech(300), sampleRate: RATE, channels: 1, words: [{ word: 'e', startMs: 0, endMs: 150 }, { word: 'f', startMs: 150, endMs: 300 }] }));
  s.worker.queueFrame(frame('tts-stopped', {}));
  await s.clock.advanceUntil(() => s.played().length === 6 && !s.output.botSpeaking, 3000);
  t.deepEqual(s.played().map((w) => w.word), ['a', 'b', 'c', 'd', 'e', 'f']);
  // The silent frames of the underrun did not count as the next chunk's audio.
  t.true(at('e') >= resumedAt - startedAt, `e at ${at('e')} ms, audio resumed at ${resumedAt - startedAt} ms`);
  t.true(at('f') - at('e') >= 150 - 40 && at('f') - at('e') <= 150 + 40, `f ${at('f') - at('e')} ms after e`);
  t.is(s.avatar.unmatchedFrames, 0, 'every speech frame was recognised as the audio fed or as silence');
  await s.worker.cancel();
});

test('a turn whose synthesis produced no audio releases its tts-stopped at once; bad audio is ignored, not fatal', async (t) => {
  const s = await session({ tts: false });
  t.teardown(() => s.worker.cancel());
  const stops = () => s.observer.events.filter((e: { source: string; frame: Frame; direction: string }) => e.source === s.avatar.name && e.direction === 'downstream' && e.frame.type === 'tts-stopped').length;
  s.worker.queueFrame(frame('tts-started', {}));
  s.worker.queueFrame(frame('tts-audio', { pcm: new Int16Array(640), sampleRate: RATE, channels: 2, words: [{ word: 'stereo', startMs: 0, endMs: 10 }] }));
  s.worker.queueFrame(frame('tts-stopped', {}));
  await s.clock.advance(200);
  t.is(stops(), 1);
  t.deepEqual(s.played(), [], 'words of audio nobody heard are not reported');
  t.false(s.output.botSpeaking);
  t.false(s.worker.finished, 'the pipeline keeps running');
  await s.worker.cancel();
});

test('a TTS without word timings: with a face its audio is not held for the whole piece, and the estimated words still play in their place', async (t) => {
  let paced: PacedTTS | undefined;
  const s = await session({ service: (clock) => (paced = new PacedTTS(clock)), hold: false });
  t.teardown(() => s.worker.cancel());
  const text = words(10); // ten 100 ms chunks, one every 50 ms; ten words of the same length
  const askedAt = s.clock.now();
  s.worker.queueFrame(frame('tts-speak', { text: text.join(' ') }));
  await s.clock.advanceUntil(() => s.output.botSpeaking, 2000);
  const speakingAt = s.clock.now();
  // The face started on the first chunks, long before the provider's last one (500 ms in).
  t.true(speakingAt - askedAt < 250, `speaking ${speakingAt - askedAt} ms after the request`);
  await s.clock.advanceUntil(() => !s.output.botSpeaking, 5000);
  t.true(paced!.lastAudioAt - askedAt >= 500, `the provider's last audio came ${paced!.lastAudioAt - askedAt} ms in, the face spoke ${speakingAt - askedAt} ms in`);
  t.deepEqual(s.played().map((w) => w.word), text);
  // Estimated timings: word i at i * 100 ms of the piece's 1 s; reported once its frame played,
  // except the words whose place had played before the provider finished (reported at once then).
  for (const [i, w] of s.played().entries()) {
    const due = Math.max(speakingAt + i * 100, paced!.lastAudioAt);
    t.true(w.at >= due - 40 && w.at <= due + 80, `${w.word} reported at ${w.at - speakingAt} ms, placed at ${i * 100} ms`);
  }
  await s.worker.cancel();
});

test('a TTS without word timings, held (no face after it): the piece is synthesised before its first audio, so a plain output can place its words', async (t) => {
  let paced: PacedTTS | undefined;
  const s = await session({ service: (clock) => (paced = new PacedTTS(clock)), hold: true });
  t.teardown(() => s.worker.cancel());
  s.worker.queueFrame(frame('tts-speak', { text: words(10).join(' ') }));
  await s.clock.advanceUntil(() => s.output.botSpeaking, 2000);
  t.true(paced!.lastAudioAt <= s.clock.now(), 'the first audio waited for the last chunk');
  await s.clock.advanceUntil(() => !s.output.botSpeaking, 5000);
  t.deepEqual(s.played().map((w) => w.word), words(10));
  await s.worker.cancel();
});
