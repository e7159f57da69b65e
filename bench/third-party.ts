/**
 * third_party bench: a whole S2S session (buildS2SPipeline, each provider plugin against its
 * local fake with a fixed response latency: OpenAI Realtime through the SDK over loopback TLS,
 * ElevenLabs Conversational AI over loopback ws; the in-process human-portrait face at 640x360
 * JPEG, the output on a timed sink), on the real clock.
 *
 * - provider first audio -> first lip-synced frame: the fake sends its first audio delta ->
 *   the sink receives the first speech frame's image (goal p50 < 100 ms; the face waits for
 *   80 ms of audio before it starts a turn, which a provider sending faster than real time fills
 *   in one delta);
 * - provider interruption -> silence: the fake sends `speech_started` (OpenAI) or `interruption`
 *   (ElevenLabs) over a playing answer ->
 *   the output clears the sink (no audio is written after it) (goal < 100 ms);
 * - our overhead per turn: the fake's `speech_stopped` -> the first audio written to the sink,
 *   minus the fake's fixed latency (SDK parsing, pipeline, face prebuffer and rendering).
 *
 * Run: `npm run bench -- third-party` (about 40 s).
 */
import { frame, PipelineWorker, RealClock, Registry, type Plugin } from '../core/index.ts';
import type { ImagePayload } from '../core/frames.ts';
import { buildS2SPipeline, type S2SAgentRecord } from '../agent/s2s-pipeline.ts';
import type { FaceModel } from '../processors/avatar/face-model.ts';
import { facePlugin } from '../plugins/face/index.ts';
import { createOpenAIRealtimePlugin } from '../plugins/openai-realtime/index.ts';
import { createElevenLabsConvaiPlugin } from '../plugins/elevenlabs-convai/index.ts';
import { MemoryMediaSink } from '../transports/media-sink.ts';
import { startOpenAIRealtimeFake } from '../test/fakes/openai-realtime.ts';
import { startElevenLabsConvaiFake } from '../test/fakes/elevenlabs-convai.ts';
import { holdsWithin } from '../testing/until.ts';
import { median, percentile, printJson, printTable } from './table.ts';

const TURNS = 12;
const BARGE_INS = 6;
const FIXED_LATENCY_MS = 150;

class TimedSink extends MemoryMediaSink {
  readonly audioAt: number[] = [];
  readonly speechImageAt: number[] = [];
  clearedAt: number[] = [];
  override writeAudio(pcm: Int16Array, sampleRate: number, ptsMs: number): void {
    this.audioAt.push(performance.now());
    super.writeAudio(pcm, sampleRate, ptsMs);
  }
  override writeImage(image: ImagePayload & { frameType?: string }, ptsMs: number): void {
    if (image.frameType === 'speech-start') this.speechImageAt.push(performance.now());
    super.writeImage(image, ptsMs);
  }
  override clear(): void {
    this.clearedAt.push(performance.now());
    super.clear();
  }
}

const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));

function utterance(speechMs: number, silenceMs: number): Int16Array {
  const pcm = new Int16Array(((speechMs + silenceMs) * 16_000) / 1000);
  for (let i = 0; i < (speechMs * 16_000) / 1000; i++) pcm[i] = Math.round(9000 * Math.sin((2 * Math.PI * 220 * i) / 16_000));
  return pcm;
}

/** What the bench needs of a provider and its fake. */
interface ProviderUnderTest {
  readonly label: string;
  readonly plugin: Plugin;
  readonly apiKey: string;
  readonly agent: Partial<S2SAgentRecord>;
  enqueue(...replies: string[]): void;
  /** Fake send times (performance.now) of: first audio of each response, user speech stop, barge-in signal. */
  firstAudio(): number[];
  speechStopped(): number[];
  bargeIns(): number[];
  close(): Promise<void>;
}

async function openAIUnderTest(): Promise<ProviderUnderTest> {
  const fake = await startOpenAIRealtimeFake({ responseDelayMs: FIXED_LATENCY_MS });
  const at = (kind: string) => fake.timeline.filter((e) => e.kind === kind).map((e) => e.at);
  return {
    label: 'openai-realtime',
    plugin: createOpenAIRealtimePlugin({ baseURL: fake.baseURL, tls: { ca: fake.ca } }),
    apiKey: fake.apiKey,
    agent: { sts_provider: 'openai-realtime' },
    enqueue: (...r) => fake.enqueue(...r),
    firstAudio: () => at('first-delta'),
    speechStopped: () => at('speech-stopped'),
    // The first speech_started of a barge-in (the answer's own turn starts one too).
    bargeIns: () => at('speech-started'),
    close: () => fake.close(),
  };
}

async function elevenLabsUnderTest(): Promise<ProviderUnderTest> {
  const fake = await startElevenLabsConvaiFake({ responseDelayMs: FIXED_LATENCY_MS });
  const at = (kind: string) => fake.timeline.filter((e) => e.kind === kind).map((e) => e.at);
  return {
    label: 'elevenlabs-convai',
    plugin: createElevenLabsConvaiPlugin({ baseUrl: fake.baseUrl }),
    apiKey: fake.apiKey,
    agent: { sts_provider: 'elevenlabs-convai', sts_config_id: 'agent_fake_ada' },
    enqueue: (...r) => fake.enqueue(...r),
    firstAudio: () => at('first-audio'),
    speechStopped: () => at('speech-stopped'),
    bargeIns: () => at('interruption'),
    close: () => fake.close(),
  };
}

async function measure(p: ProviderUnderTest) {
  const registry = new Registry().use(facePlugin).use(p.plugin);
  const face = registry.create<FaceModel>('face', 'human-portrait');
  const sink = new TimedSink();
  const built = await buildS2SPipeline(
    { agent_id: 'bench', mode: 'third_party', language: 'en', system_prompt: null, tts_provider: 'local', voice_id: null, starts_conversation: false, session_limit_seconds: 3600, behaviour: {}, advanced: {}, tools: [], sts_config_id: null, provider_config: {}, ...p.agent },
    { registry, sink, apiKey: p.apiKey, face: (clock) => face.openSession({ configuration: { width: 640, height: 360 }, imageFormat: 'jpeg' }, clock), logger: { info() {}, warn() {} } },
  );
  const worker = new PipelineWorker(built.pipeline, { clock: new RealClock(), heartbeatMs: null, idleTimeoutMs: null, ...built.workerOptions });
  void worker.run();
  const say = (pcm: Int16Array) => {
    for (let i = 0; i < pcm.length; i += 320) worker.queueFrame(frame('input-audio', { pcm: pcm.subarray(i, i + 320), sampleRate: 16_000, channels: 1 }));
  };
  try {
    await holdsWithin(() => built.s2s.live !== undefined && sink.images.length > 0, { timeoutMs: 30_000, intervalMs: 2 });
    const firstFrame: number[] = [];
    const overhead: number[] = [];
    const toSilence: number[] = [];
    let audioAfterClear = 0;

    // Turns played to the end.
    p.enqueue(...Array.from({ length: TURNS + 1 }, (_, i) => `Answer number ${i} is short`));
    for (let turn = 0; turn <= TURNS; turn++) {
      const deltas = p.firstAudio().length;
      const images = sink.speechImageAt.length;
      const stops = p.speechStopped().length;
      const writes = sink.audioAt.length;
      say(utterance(300, 600));
      await holdsWithin(() => sink.speechImageAt.length > images && p.firstAudio().length > deltas, { timeoutMs: 10_000, intervalMs: 2 });
      await holdsWithin(() => !built.output.botSpeaking && sink.audioAt.length > writes, { timeoutMs: 10_000, intervalMs: 2 });
      await wait(300);
      if (turn === 0) continue; // warm-up: the first speech frames compile the speech path
      firstFrame.push(sink.speechImageAt[images]! - p.firstAudio()[deltas]!);
      overhead.push(sink.audioAt[writes]! - p.speechStopped()[stops]! - FIXED_LATENCY_MS);
    }

    // Barge-ins over a long answer.
    for (let b = 0; b < BARGE_INS; b++) {
      p.enqueue(Array.from({ length: 16 }, (_, i) => `phrase${i} goes on`).join(' '), 'Okay then');
      const clears = sink.clearedAt.length;
      const signals = p.bargeIns().length;
      say(utterance(300, 600));
      await holdsWithin(() => built.output.botSpeaking, { timeoutMs: 10_000, intervalMs: 2 });
      const signalsBefore = p.bargeIns().length;
      await wait(700);
      say(utterance(250, 600));
      await holdsWithin(() => sink.clearedAt.length > clears && p.bargeIns().length > signalsBefore, { timeoutMs: 5_000, intervalMs: 2 });
      const cleared = sink.clearedAt[clears]!;
      toSilence.push(cleared - p.bargeIns()[Math.max(signals, signalsBefore)]!);
      await holdsWithin(() => !built.output.botSpeaking, { timeoutMs: 10_000, intervalMs: 2 });
      await wait(700);
      // Audio written after the clear and before the answer to the barge-in starts: the cut turn leaking.
      const nextTurn = sink.speechImageAt.find((t) => t > cleared) ?? Infinity;
      audioAfterClear += sink.audioAt.filter((t) => t > cleared + 1 && t < nextTurn - 1).length;
      await holdsWithin(() => !built.output.botSpeaking, { timeoutMs: 10_000, intervalMs: 2 });
    }
    return { firstFrame, overhead, toSilence, audioAfterClear };
  } finally {
    await worker.cancel();
    await p.close();
  }
}

export async function run(): Promise<void> {
  const rows: Array<Record<string, string | number>> = [];
  const figures: Record<string, unknown> = {};
  for (const open of [openAIUnderTest, elevenLabsUnderTest]) {
    const p = await open();
    const r = await measure(p);
    const row = (name: string, xs: number[], goal: string) => ({ provider: p.label, figure: name, p50_ms: median(xs), p95_ms: percentile(xs, 95), max_ms: Math.max(...xs), n: xs.length, goal });
    rows.push(
      row('provider first audio -> first lip-synced frame', r.firstFrame, 'p50 < 100 ms'),
      row('provider interruption -> silence', r.toSilence, '< 100 ms'),
      row(`our overhead per turn (over the fake's fixed ${FIXED_LATENCY_MS} ms)`, r.overhead, '-'),
    );
    const key = p.label.replace(/-/g, '_');
    Object.assign(figures, {
      [`${key}_first_audio_to_lipsynced_frame_p50_ms`]: +median(r.firstFrame).toFixed(1),
      [`${key}_first_audio_to_lipsynced_frame_p95_ms`]: +percentile(r.firstFrame, 95).toFixed(1),
      [`${key}_interruption_to_silence_p50_ms`]: +median(r.toSilence).toFixed(1),
      [`${key}_interruption_to_silence_max_ms`]: +Math.max(...r.toSilence).toFixed(1),
      [`${key}_audio_chunks_after_clear`]: r.audioAfterClear,
      [`${key}_overhead_per_turn_p50_ms`]: +median(r.overhead).toFixed(1),
      [`${key}_overhead_per_turn_p95_ms`]: +percentile(r.overhead, 95).toFixed(1),
    });
  }
  printTable(rows);
  printJson('third_party', { ...figures, fixed_provider_latency_ms: FIXED_LATENCY_MS, turns: TURNS, barge_ins: BARGE_INS });
}

if (import.meta.url === `file://${process.argv[1]}`) await run();
