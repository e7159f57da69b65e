/**
 * The conversation the voice bench runs (bench/voice.ts, bench/_voice-providers.ts): speech made
 * by the offline TTS fed in real time to the real WebRTC VAD, turn after turn, through the voice
 * pipeline with the given services; every turn's clock times (Marks) taken by an observer, the
 * service-boundary wrappers and a timed sink, and the barge-ins after them.
 */
import { Subject } from 'rxjs';
import { concat, frame, PipelineWorker, RealClock, silence } from '../core/index.ts';
import type { FrameObserver, FramePushed } from '../core/observer.ts';
import { createVoicePipeline } from '../agent/voice-pipeline.ts';
import type { LLMEvent, LLMRequest, LLMService, STTService, STTStream, STTStreamOptions, TranscriptEvent, TTSEvent, TTSRequest, TTSService } from '../processors/services.ts';
import { LocalTTSService } from '../plugins/local/local-tts.ts';
import { WebRtcVADAnalyzer } from '../plugins/local/webrtc-vad.ts';
import type { MediaSink } from '../transports/media-sink.ts';
import { percentile } from './table.ts';

export const TURNS = Number(process.env.BENCH_VOICE_TURNS ?? 50);
export const BARGE_INS = Number(process.env.BENCH_VOICE_BARGE_INS ?? 10);
/** Turns and barge-ins of each provider's row (one provider on its fake, the others in-process). */
export const PROVIDER_TURNS = Number(process.env.BENCH_VOICE_PROVIDER_TURNS ?? 20);
export const PROVIDER_BARGE_INS = Number(process.env.BENCH_VOICE_PROVIDER_BARGE_INS ?? 5);
export const VAD_STOP_MS = 300;
export const LATENCY = { sttFinalMs: 150, llmFirstTokenMs: 300, ttsFirstAudioMs: 100 } as const;
const RATE = 16_000;
export const QUESTION = 'what is the weather like';
const ANSWER = 'It is sunny today. Enjoy your day!';
const STORY = 'Here is a long story that goes on and on. '.repeat(6).trim();

const clock = new RealClock();

// ---- measurement points ---------------------------------------------------------------------

/** Clock times of one turn, filled by the observer, the service wrappers and the sink. */
interface Marks {
  vadStop?: number; finalizeCall?: number; finalEvent?: number; transcription?: number; turnClosed?: number;
  llmCall?: number; llmFirst?: number; llmText?: number; ttsCall?: number; ttsFirst?: number; ttsAudio?: number; firstWrite?: number;
}
export let marks: Marks = {};
/** Turns whose overhead exceeds this (ms) are printed with their stages (BENCH_VOICE_SLOW_MS; off by default). */
const SLOW_TURN_MS = process.env.BENCH_VOICE_SLOW_MS ? Number(process.env.BENCH_VOICE_SLOW_MS) : null;
const mark = (key: keyof Marks) => {
  marks[key] ??= clock.now();
};

/** Stages of a turn: [label, from, to, who]. `who` says whether the stage is ours or a provider's. */
export const STAGES: ReadonlyArray<readonly [string, keyof Marks, keyof Marks, 'framework' | 'provider' | 'framework + LLM stream']> = [
  ['VAD stop -> STT finalize()', 'vadStop', 'finalizeCall', 'framework'],
  ['STT finalize() -> final event', 'finalizeCall', 'finalEvent', 'provider'],
  ['final event -> transcription frame', 'finalEvent', 'transcription', 'framework'],
  ['transcription -> turn closed (llm-messages)', 'transcription', 'turnClosed', 'framework'],
  ['turn closed -> LLM stream() called', 'turnClosed', 'llmCall', 'framework'],
  ['LLM stream() -> first token', 'llmCall', 'llmFirst', 'provider'],
  ['first token -> llm-text frame', 'llmFirst', 'llmText', 'framework'],
  ['llm-text -> TTS synthesize() (sentence complete)', 'llmText', 'ttsCall', 'framework + LLM stream'],
  ['TTS synthesize() -> first audio', 'ttsCall', 'ttsFirst', 'provider'],
  ['first audio -> tts-audio frame', 'ttsFirst', 'ttsAudio', 'framework'],
  ['tts-audio -> written by the output', 'ttsAudio', 'firstWrite', 'framework'],
];

class TurnObserver implements FrameObserver {
  requests: number[] = [];
  onFramePushed(e: FramePushed): void {
    const f = e.frame;
    if (e.direction !== 'downstream') {
      if (f.type === 'interruption-request') this.requests.push(e.timestampMs);
      return;
    }
    if (f.type === 'user-stopped-speaking' && e.source.startsWith('TurnProcessor')) marks.vadStop ??= e.timestampMs;
    else if (f.type === 'transcription' && f.final) marks.transcription ??= e.timestampMs;
    else if (f.type === 'llm-messages' && f.run && e.source.startsWith('UserTurnAggregator')) marks.turnClosed ??= e.timestampMs;
    else if (f.type === 'llm-text' && e.source.startsWith('LLMProcessor')) marks.llmText ??= e.timestampMs;
    else if (f.type === 'tts-audio' && e.source.startsWith('TTSProcessor')) marks.ttsAudio ??= e.timestampMs;
  }
}

class TimedSink implements MediaSink {
  writes: number[] = [];
  clears: number[] = [];
  writeAudio(): void {
    const now = clock.now();
    this.writes.push(now);
    marks.firstWrite ??= now;
  }
  clear(): void {
    this.clears.push(clock.now());
  }
}

// ---- service-boundary wrappers (measure, delegate) -------------------------------------------

function timedSTT(inner: STTService): STTService {
  return {
    name: inner.name,
    async connect(options, signal) {
      const stream = await inner.connect(options, signal);
      const transcripts = new Subject<TranscriptEvent>();
      stream.transcripts.subscribe({
        next: (e) => {
          if (e.final && e.text.trim()) mark('finalEvent');
          transcripts.next(e);
        },
        error: (err) => transcripts.error(err),
        complete: () => transcripts.complete(),
      });
      return {
        sendAudio: (pcm) => stream.sendAudio(pcm),
        finalize: () => {
          mark('finalizeCall');
          stream.finalize();
        },
        transcripts,
        close: () => stream.close(),
      };
    },
  };
}

function timedLLM(inner: LLMService): LLMService {
  return {
    name: inner.name,
    model: inner.model,
    async *stream(request) {
      mark('llmCall');
      for await (const e of inner.stream(request)) {
        if (e.type === 'text') mark('llmFirst');
        yield e;
      }
    },
  };
}

function timedTTS(inner: TTSService): TTSService {
  return {
    name: inner.name,
    async *synthesize(request) {
      mark('ttsCall');
      for await (const e of inner.synthesize(request)) {
        if (e.type === 'audio') mark('ttsFirst');
        yield e;
      }
    },
  };
}

// ---- in-process providers at fixed latencies ---------------------------------------------------

export class FixedSTT implements STTService {
  readonly name = 'fixed-stt';
  async connect(_options: STTStreamOptions): Promise<STTStream> {
    const transcripts = new Subject<TranscriptEvent>();
    return {
      sendAudio: () => undefined,
      finalize: () => void clock.setTimeout(() => transcripts.next({ text: QUESTION, final: true, endOfUtterance: true }), LATENCY.sttFinalMs),
      transcripts,
      close: async () => transcripts.complete(),
    };
  }
}

export let reply = ANSWER;
export class FixedLLM implements LLMService {
  readonly name = 'fixed-llm';
  async *stream(request: LLMRequest): AsyncIterable<LLMEvent> {
    await clock.sleep(LATENCY.llmFirstTokenMs, request.signal);
    for (const token of reply.match(/\S+\s*/g) ?? []) yield { type: 'text', text: token };
    yield { type: 'done', finishReason: 'stop' };
  }
}

/** 60 ms of tone per word, word timings first (as the ElevenLabs and espeak plugins do). */
export class FixedTTS implements TTSService {
  readonly name = 'fixed-tts';
  async *synthesize(request: TTSRequest): AsyncIterable<TTSEvent> {
    await clock.sleep(LATENCY.ttsFirstAudioMs, request.signal);
    const words = request.text.split(/\s+/).filter(Boolean);
    yield { type: 'words', words: words.map((word, i) => ({ word, startMs: i * 60, endMs: (i + 1) * 60 })) };
    const n = (request.sampleRate * 60) / 1000;
    for (const _ of words) {
      const pcm = new Int16Array(n);
      for (let i = 0; i < n; i++) pcm[i] = Math.round(6000 * Math.sin((2 * Math.PI * 200 * i) / request.sampleRate));
      yield { type: 'audio', pcm, sampleRate: request.sampleRate };
    }
  }
}

// ---- driving a conversation --------------------------------------------------------------------

async function speechClip(text: string): Promise<{ pcm: Int16Array; speechEndMs: number }> {
  const parts: Int16Array[] = [];
  for await (const e of new LocalTTSService().synthesize({ text, sampleRate: RATE })) if (e.type === 'audio') parts.push(e.pcm);
  const pcm = concat(parts);
  let last = pcm.length - 1;
  while (last > 0 && Math.abs(pcm[last]!) < 300) last--;
  return { pcm, speechEndMs: (last / RATE) * 1000 };
}

/** Feeds audio as 20 ms frames against absolute deadlines (real time); returns the start time. */
async function feed(worker: PipelineWorker, pcm: Int16Array): Promise<number> {
  const start = clock.now();
  for (let off = 0, i = 0; off < pcm.length; off += 320, i++) {
    worker.queueFrame(frame('input-audio', { pcm: pcm.subarray(off, off + 320), sampleRate: RATE, channels: 1 }));
    await clock.sleep(Math.max(0, start + (i + 1) * 20 - clock.now()));
  }
  return start;
}

const waitFor = async (cond: () => boolean, stepMs = 2, maxMs = 20_000) => {
  for (const until = clock.now() + maxMs; !cond() && clock.now() < until; ) await clock.sleep(stepMs);
};

export interface Services { stt: STTService; llm: LLMService; tts: TTSService }
export interface VendorWaits { stt: number; llm: number; tts: number }

export interface RunResult {
  turnMs: number[]; vadStopMs: number[]; overhead: number[]; stages: Map<string, number[]>;
  vendorOverhead: number[]; sdkWire: number[]; sdkWireBy: Record<'stt' | 'llm' | 'tts', number[]>; bargeMs: number[]; bargeChunks: number[];
}

export async function conversation(services: Services, vendorWaits?: () => VendorWaits, counts: { turns: number; bargeIns: number; audioAsItComes?: boolean } = { turns: TURNS, bargeIns: BARGE_INS }): Promise<RunResult> {
  const question = await speechClip('What is the weather like?');
  const sink = new TimedSink();
  const observer = new TurnObserver();
  const voice = createVoicePipeline({
    vad: new WebRtcVADAnalyzer(),
    stt: timedSTT(services.stt),
    llm: timedLLM(services.llm),
    tts: timedTTS(services.tts),
    sink,
    language: 'en',
    vadOptions: { stopMs: VAD_STOP_MS },
    // As in sessions, where the avatar follows the TTS: audio leaves as it comes, not held for word timings.
    ...(counts.audioAsItComes ? { ttsOptions: { holdAudioForWordTimings: false } } : {}),
  });
  const worker = new PipelineWorker(voice.processors, { clock, audioInSampleRate: RATE, audioOutSampleRate: RATE, observers: [observer], heartbeatMs: null, idleTimeoutMs: null });
  void worker.run();
  await clock.sleep(300);
  const r: RunResult = { turnMs: [], vadStopMs: [], overhead: [], stages: new Map(), vendorOverhead: [], sdkWire: [], sdkWireBy: { stt: [], llm: [], tts: [] }, bargeMs: [], bargeChunks: [] };
  const silenceAfter = silence(VAD_STOP_MS + 200, RATE);

  reply = ANSWER;
  for (let turn = 0; turn < counts.turns + 2; turn++) {
    marks = {};
    const start = await feed(worker, question.pcm);
    await feed(worker, silenceAfter);
    await waitFor(() => marks.firstWrite !== undefined);
    const m = marks as Required<Marks>;
    const sttWait = Math.max(0, m.finalEvent - Math.max(m.vadStop, m.finalizeCall));
    const providerWait = sttWait + (m.llmFirst - m.llmCall) + (m.ttsFirst - m.ttsCall);
    if (turn >= 2) {
      // The first two turns warm up the JIT and the sockets; they are not counted.
      r.turnMs.push(m.firstWrite - (start + question.speechEndMs));
      r.vadStopMs.push(m.vadStop - (start + question.speechEndMs));
      r.overhead.push(m.firstWrite - m.vadStop - providerWait);
      if (SLOW_TURN_MS !== null && r.overhead.at(-1)! > SLOW_TURN_MS) {
        // Diagnosis of a tail: the framework stages of this turn (BENCH_VOICE_SLOW_MS).
        const stages = STAGES.filter(([, , , who]) => who !== 'provider').map(([label, from, to]) => `${label}: ${(m[to] - m[from]).toFixed(2)}`);
        console.error(`slow turn ${turn}: overhead ${r.overhead.at(-1)!.toFixed(2)} ms; ${stages.join('; ')}`);
      }
      for (const [label, from, to] of STAGES) {
        const list = r.stages.get(label) ?? [];
        list.push(Math.max(0, m[to] - m[from]));
        r.stages.set(label, list);
      }
      if (vendorWaits) {
        const v = vendorWaits();
        const vendor = v.stt + v.llm + v.tts;
        r.vendorOverhead.push(m.firstWrite - m.vadStop - vendor);
        r.sdkWire.push(providerWait - vendor);
        r.sdkWireBy.stt.push(sttWait - v.stt);
        r.sdkWireBy.llm.push(m.llmFirst - m.llmCall - v.llm);
        r.sdkWireBy.tts.push(m.ttsFirst - m.ttsCall - v.tts);
      }
    }
    await waitFor(() => !voice.output.botSpeaking, 20);
    await clock.sleep(100);
  }

  reply = STORY;
  for (let i = 0; i < counts.bargeIns; i++) {
    await feed(worker, question.pcm);
    await feed(worker, silenceAfter);
    await waitFor(() => voice.output.botSpeaking);
    await clock.sleep(600);
    const from = clock.now();
    const feeding = feed(worker, question.pcm);
    await waitFor(() => observer.requests.some((t) => t >= from) && !voice.output.botSpeaking, 1);
    const requested = observer.requests.find((t) => t >= from)!;
    const silentAt = sink.clears.find((t) => t >= requested)!;
    r.bargeMs.push(silentAt - requested);
    r.bargeChunks.push(sink.writes.filter((w) => w >= requested).length);
    await feeding;
    await feed(worker, silenceAfter);
    await clock.sleep(300);
    await waitFor(() => !voice.output.botSpeaking, 20);
    await clock.sleep(200);
  }
  await worker.cancel();
  return r;
}


const fmt = (v: number) => +v.toFixed(2);
export const p = (values: number[], q: number) => fmt(percentile(values, q));
