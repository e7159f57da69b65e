/**
 * Voice benchmark: what the framework adds to a conversation turn, with the vendors' latencies
 * fixed by local fakes (STT final 150 ms, LLM first token 300 ms, TTS first audio 100 ms) and
 * reached through the real SDKs over loopback.
 *
 * - overhead_ms: from the end of user speech to the first bot audio written by the output, minus
 *   the VAD stop time and minus the time spent waiting on the vendors (measured by the fakes:
 *   request received -> first byte sent). What remains is ours: turn closing, context building,
 *   sentence aggregation, SDK and socket handling, resampling, chunking, playback scheduling.
 * - barge_in_ms: from the VAD detecting user speech over the bot to the output going silent, and
 *   the number of 20 ms chunks written in between.
 */
import { concat, frame, PipelineWorker, RealClock, silence, type Frame } from '../core/index.ts';
import { createVoicePipeline } from '../processors/voice-pipeline.ts';
import { DeepgramSTTService } from '../plugins/deepgram/index.ts';
import { OpenAILLMService } from '../plugins/openai/llm.ts';
import { ElevenLabsTTSService } from '../plugins/elevenlabs/tts.ts';
import { LocalTTSService } from '../plugins/local/local-tts.ts';
import { WebRtcVADAnalyzer } from '../plugins/local/webrtc-vad.ts';
import { startVendorFakes } from '../test/fakes/index.ts';
import type { FrameObserver } from '../core/observer.ts';
import type { MediaSink } from '../transports/media-sink.ts';
import { percentile, printJson, printTable } from './table.ts';

const TURNS = Number(process.env.BENCH_VOICE_TURNS ?? 50);
const BARGE_INS = 10;
const VAD_STOP_MS = 300;
const LATENCY = { sttFinalMs: 150, llmFirstTokenMs: 300, ttsFirstAudioMs: 100 } as const;

class TimedSink implements MediaSink {
  writes: number[] = [];
  constructor(private readonly clock: RealClock) {}
  writeAudio(): void {
    this.writes.push(this.clock.now());
  }
  clear(): void {}
}

class FrameTimes implements FrameObserver {
  readonly seen: Array<{ type: Frame['type']; at: number; source: string }> = [];
  onFramePushed(e: { frame: Frame; timestampMs: number; source: string }): void {
    if (e.frame.type === 'user-stopped-speaking' || e.frame.type === 'interruption-request' || e.frame.type === 'bot-stopped-speaking' || e.frame.type === 'interruption') {
      this.seen.push({ type: e.frame.type, at: e.timestampMs, source: e.source });
    }
  }
  last(type: Frame['type'], after = 0): number | undefined {
    return this.seen.filter((s) => s.type === type && s.at >= after).map((s) => s.at)[0];
  }
}

async function speechClip(text: string): Promise<Int16Array> {
  const tts = new LocalTTSService();
  const parts: Int16Array[] = [];
  for await (const e of tts.synthesize({ text, sampleRate: 16_000 })) if (e.type === 'audio') parts.push(e.pcm);
  return concat(parts);
}

async function feed(worker: PipelineWorker, pcm: Int16Array, clock: RealClock): Promise<number> {
  // Real-time feeding: 20 ms frames against absolute deadlines.
  const start = clock.now();
  let i = 0;
  for (let off = 0; off < pcm.length; off += 320, i++) {
    worker.queueFrame(frame('input-audio', { pcm: pcm.subarray(off, off + 320), sampleRate: 16_000, channels: 1 }));
    const due = start + (i + 1) * 20;
    await clock.sleep(Math.max(0, due - clock.now()));
  }
  return clock.now();
}

export async function run(): Promise<void> {
  const clock = new RealClock();
  let reply = 'It is sunny today.';
  const fakes = await startVendorFakes({
    deepgram: { finalDelayMs: LATENCY.sttFinalMs, script: ['what is the weather like'] },
    openai: { firstTokenDelayMs: LATENCY.llmFirstTokenMs, respond: () => ({ text: reply }) },
    elevenlabs: { firstAudioDelayMs: LATENCY.ttsFirstAudioMs },
  });
  const question = await speechClip('What is the weather like?');
  const sink = new TimedSink(clock);
  const times = new FrameTimes();
  const voice = createVoicePipeline({
    vad: new WebRtcVADAnalyzer(),
    stt: new DeepgramSTTService(fakes.pluginOptions.stt),
    llm: new OpenAILLMService(fakes.pluginOptions.llm),
    tts: new ElevenLabsTTSService(fakes.pluginOptions.tts),
    sink,
    language: 'en',
    vadOptions: { stopMs: VAD_STOP_MS },
  });
  const worker = new PipelineWorker(voice.pipeline, { clock, audioInSampleRate: 16_000, audioOutSampleRate: 16_000, observers: [times], heartbeatMs: null, idleTimeoutMs: null });
  void worker.run();
  await clock.sleep(200);

  const overhead: number[] = [];
  const raw: number[] = [];
  for (let turn = 0; turn < TURNS; turn++) {
    const writesBefore = sink.writes.length;
    const speechEnd = await feed(worker, question, clock);
    await feed(worker, silence(VAD_STOP_MS + 100, 16_000), clock);
    while (sink.writes.length === writesBefore) await clock.sleep(5);
    const firstAudio = sink.writes[writesBefore]!;
    const vadStop = times.last('user-stopped-speaking', speechEnd)!;
    const final = fakes.deepgram.finalTimings.at(-1)!;
    const llm = fakes.openai.requests.at(-1)!;
    const tts = fakes.elevenlabs.requests.at(-1)!;
    // Vendor waits inside the window: STT final still outstanding after the VAD stop, LLM and TTS first bytes.
    const sttWait = Math.max(0, (final.sentAtMs ?? vadStop) - vadStop);
    const llmWait = (llm.firstChunkAtMs ?? llm.receivedAtMs) - llm.receivedAtMs;
    const ttsWait = (tts.firstAudioAtMs ?? tts.receivedAtMs) - tts.receivedAtMs;
    raw.push(firstAudio - speechEnd);
    overhead.push(firstAudio - vadStop - sttWait - llmWait - ttsWait);
    // Let the answer play out before the next question.
    while (voice.output.botSpeaking || sink.writes.length === writesBefore) await clock.sleep(20);
    await clock.sleep(100);
  }

  // Barge-in: the user talks over a long answer.
  reply = 'Here is a long story that goes on and on. '.repeat(6);
  const bargeMs: number[] = [];
  const bargeChunks: number[] = [];
  for (let i = 0; i < BARGE_INS; i++) {
    await feed(worker, question, clock);
    await feed(worker, silence(VAD_STOP_MS + 100, 16_000), clock);
    while (!voice.output.botSpeaking) await clock.sleep(5);
    await clock.sleep(600);
    const from = clock.now();
    const feeding = feed(worker, question, clock);
    while (voice.output.botSpeaking) await clock.sleep(1);
    // The VAD's decision that the user speaks over the bot is its interruption request.
    const started = times.last('interruption-request', from)!;
    const silent = times.last('bot-stopped-speaking', started)!;
    bargeMs.push(silent - started);
    bargeChunks.push(sink.writes.filter((w) => w >= started).length);
    await feeding;
    await feed(worker, silence(VAD_STOP_MS + 100, 16_000), clock);
    while (voice.output.botSpeaking) await clock.sleep(20);
    await clock.sleep(1500);
    while (voice.output.botSpeaking) await clock.sleep(20);
  }
  await worker.cancel();
  await fakes.close();

  printTable([
    { figure: 'turn: end of speech -> first audio (ms)', p50: percentile(raw, 50), p99: percentile(raw, 99), goal: '' },
    { figure: 'framework overhead (ms)', p50: percentile(overhead, 50), p99: percentile(overhead, 99), goal: 'p99 < 5' },
    { figure: 'barge-in: speech detected -> silence (ms)', p50: percentile(bargeMs, 50), p99: percentile(bargeMs, 99), goal: '<= 20' },
    { figure: 'barge-in: chunks written meanwhile', p50: percentile(bargeChunks, 50), p99: percentile(bargeChunks, 99), goal: '<= 1' },
  ]);
  printJson('voice', {
    turns: TURNS,
    vad_stop_ms: VAD_STOP_MS,
    vendor_latency_ms: LATENCY,
    turn_latency_p50_ms: +percentile(raw, 50).toFixed(1),
    overhead_p50_ms: +percentile(overhead, 50).toFixed(2),
    overhead_p99_ms: +percentile(overhead, 99).toFixed(2),
    barge_in_p50_ms: +percentile(bargeMs, 50).toFixed(2),
    barge_in_p99_ms: +percentile(bargeMs, 99).toFixed(2),
    barge_in_chunks_max: Math.max(...bargeChunks),
  });
}
