/**
 * The avatar processor in remote mode: the face model runs behind the server's /realtime
 * endpoint (real REST server, PostgreSQL, API key) and the pipeline reaches it through
 * `openRemoteFaceSession` (SvcClient over a real WebSocket). Same contract as in-process:
 * paired image + 40 ms audio out, speaking state from what was emitted, interruption to idle.
 */
import test from 'ava';
import { until } from '../../testing/until.ts';
import { frame, Pipeline, PipelineWorker, RealClock } from '../../core/index.ts';
import { RecordingObserver } from '../../core/observer.ts';
import { AvatarProcessor } from '../../processors/avatar/avatar-processor.ts';
import { TTSProcessor } from '../../processors/tts/tts-processor.ts';
import type { RealtimeEndpoint } from '../../server/realtime/index.ts';
import { MemoryMediaSink } from '../../transports/media-sink.ts';
import { OutputTransport } from '../../transports/output-transport.ts';
import { openRemoteFaceSession } from '../../transports/realtime/remote-face-session.ts';
import { ToneTTS } from '../processors/scripted-services.ts';
import type { TestServer } from '../server/harness.ts';
import { startRealtimeServer, type RealtimeServer } from '../support/realtime-server.ts';

let ts: TestServer;
let endpoint: RealtimeEndpoint;
let configId: string;

let fixture: RealtimeServer | undefined;
test.before(async () => {
  fixture = await startRealtimeServer({ label: 'remote_avatar', canvas: { width: 256, height: 192 } });
  ({ ts, endpoint, configId } = fixture);
});

test.after.always(async () => {
  await fixture?.stop();
});

const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));

function remotePipeline(t: { teardown(fn: () => unknown): void }) {
  const clock = new RealClock();
  const sink = new MemoryMediaSink();
  const url = `${ts.url.replace(/^http/, 'ws')}/realtime`;
  const avatar = new AvatarProcessor((c) => openRemoteFaceSession({ url, apiKey: ts.keyA, configId }, c));
  const output = new OutputTransport(sink, { sampleRate: 16_000 });
  const observer = new RecordingObserver();
  const worker = new PipelineWorker(new Pipeline([new TTSProcessor(new ToneTTS(clock, 20), { sampleRate: 16_000 }), avatar, output]), {
    clock, audioOutSampleRate: 16_000, heartbeatMs: null, idleTimeoutMs: null, observers: [observer],
  });
  void worker.run();
  t.teardown(() => worker.cancel());
  const images = () => observer.events
    .filter((e) => e.source === avatar.name && e.direction === 'downstream' && e.frame.type === 'output-image')
    .map((e) => (e.frame.type === 'output-image' ? e.frame.frameType : ''));
  return { sink, output, worker, images };
}

test.serial('a remote face speaks a turn: JPEG pictures with their 40 ms of audio, speaking state from what was played', async (t) => {
  const s = remotePipeline(t);
  await until(() => s.sink.images.length >= 5, { timeoutMs: 15_000, what: 'idle frames to arrive from the server' });
  t.is(s.sink.audio.length, 0, 'idle frames carry no audio to the output');
  t.like(s.sink.images[0]!.image, { width: 256, height: 192, format: 'jpeg' });
  s.worker.queueFrame(frame('tts-speak', { text: 'one two three four five six seven eight' }));
  await until(() => s.output.botSpeaking, { timeoutMs: 15_000, what: 'the bot to start speaking' });
  await until(() => !s.output.botSpeaking && s.sink.audioMs > 0, { timeoutMs: 15_000, what: 'the bot to finish speaking, its audio written' });
  const types = s.images();
  t.true(types.includes('speech-start') && types.includes('speech') && types.includes('fade-out'), types.join(','));
  // 8 words x 60 ms of speech = 480 ms: it is played, rounded up to whole 40 ms frames.
  t.true(s.sink.audioMs >= 480 && s.sink.audioMs <= 480 + 40, `${s.sink.audioMs} ms played`);
});

test.serial('an interruption reaches the remote face: it fades to idle and no speech is played after', async (t) => {
  const s = remotePipeline(t);
  await until(() => s.sink.images.length >= 3, { timeoutMs: 15_000, what: 'three idle frames at the output' });
  s.worker.queueFrame(frame('tts-speak', { text: Array.from({ length: 60 }, (_, i) => `word${i}`).join(' ') }));
  await until(() => s.output.botSpeaking, { timeoutMs: 15_000, what: 'the bot to start speaking' });
  await wait(300);
  s.worker.interrupt();
  const from = s.images().length;
  await until(() => s.images().slice(from).includes('idle'), { timeoutMs: 3000, what: 'an idle frame after the interruption' });
  const after = s.images().slice(from);
  t.false(after.slice(after.indexOf('idle')).some((x) => x === 'speech' || x === 'speech-start'), after.join(','));
  const playedAtIdle = s.sink.audioMs;
  await wait(300);
  t.is(s.sink.audioMs, playedAtIdle, 'nothing more is played');
  t.false(s.output.botSpeaking);
  t.true(playedAtIdle < 60 * 60, 'the 3.6 s answer was cut short');
});
