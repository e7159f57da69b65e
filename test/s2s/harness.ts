/**
 * A whole third_party session for the S2S tests: buildS2SPipeline with the real human-portrait
 * face (small RGB canvas) and a MemoryMediaSink, run by a PipelineWorker on the real clock,
 * everything recorded by an observer. User speech is a tone burst the fakes' energy detectors
 * hear; helpers compare what the face played with what the provider sent.
 */
import type { ExecutionContext } from 'ava';
import { holdsWithin } from '../../testing/until.ts';
import { frame, PipelineWorker, RealClock, Registry, resample, RecordingObserver, type Frame, type FrameObserver, type FrameOf, type Plugin } from '../../core/index.ts';
import { buildS2SPipeline, type S2SAgentRecord, type S2SPipeline } from '../../agent/s2s-pipeline.ts';
import type { FaceModel } from '../../processors/avatar/face-model.ts';
import { facePlugin } from '../../plugins/face/index.ts';
import { MemoryMediaSink } from '../../transports/media-sink.ts';
import type { ToolLogger } from '../../processors/tools/index.ts';

export const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function agentRecord(fields: Partial<S2SAgentRecord> = {}): S2SAgentRecord {
  return {
    agent_id: '00000000-0000-4000-8000-000000000012',
    mode: 'third_party',
    language: 'en',
    system_prompt: 'You are Ada, a friendly guide.',
    tts_provider: 'elevenlabs',
    voice_id: null,
    starts_conversation: false,
    session_limit_seconds: 600,
    behaviour: {},
    advanced: {},
    tools: [],
    sts_provider: 'openai-realtime',
    sts_config_id: null,
    provider_config: {},
    ...fields,
  };
}

/** 16 kHz tone burst (speech to an energy VAD) followed by silence. */
export function userUtterance(speechMs: number, silenceMs: number): Int16Array {
  const rate = 16_000;
  const pcm = new Int16Array(((speechMs + silenceMs) * rate) / 1000);
  const n = (speechMs * rate) / 1000;
  for (let i = 0; i < n; i++) pcm[i] = Math.round(9000 * Math.sin((2 * Math.PI * 220 * i) / rate));
  return pcm;
}

export class CapturingLogger implements ToolLogger {
  readonly lines: Array<{ level: string; fields: Record<string, unknown>; message: string }> = [];
  info(fields: Record<string, unknown>, message: string): void {
    this.lines.push({ level: 'info', fields, message });
  }
  warn(fields: Record<string, unknown>, message: string): void {
    this.lines.push({ level: 'warn', fields, message });
  }
}

export interface S2SSession {
  readonly built: S2SPipeline;
  readonly worker: PipelineWorker;
  readonly sink: MediaSinkRecorder;
  readonly observer: RecordingObserver;
  readonly logger: CapturingLogger;
  readonly outcome: Promise<unknown>;
  /** Frames a processor pushed downstream, in order. */
  outOf(name: string): Frame[];
  /** Every frame that crossed any link (both directions), once each. */
  all(): Frame[];
  errors(): FrameOf<'error'>[];
  /** Sends `pcm` (16 kHz) in 20 ms frames, as fast as given (the fakes go by audio time). */
  say(pcm: Int16Array): void;
  /** Sends `pcm` in 20 ms frames at real time. */
  sayRealtime(pcm: Int16Array): Promise<void>;
}

type MediaSinkRecorder = MemoryMediaSink;

const faceRegistry = new Registry().use(facePlugin);
const face = faceRegistry.create<FaceModel>('face', 'human-portrait');

export async function startS2SSession(
  t: ExecutionContext,
  agent: S2SAgentRecord,
  opts: {
    plugin: Plugin;
    apiKey: string;
    serviceOptions?: Record<string, unknown>;
    reconnectAttempts?: number;
    reconnectBaseMs?: number;
    withFace?: boolean;
    /** Extra observers (built after the pipeline, e.g. a session message emitter on its taps). */
    observers?: (built: S2SPipeline) => FrameObserver[];
    /** Receives the client messages the output delivers. */
    onMessage?: (message: Readonly<Record<string, unknown>>) => void;
  },
): Promise<S2SSession> {
  const registry = new Registry().use(facePlugin).use(opts.plugin);
  const sink = new MemoryMediaSink();
  if (opts.onMessage) {
    const onMessage = opts.onMessage;
    sink.sendMessage = (message) => {
      sink.messages.push(message);
      onMessage(message);
    };
  }
  const logger = new CapturingLogger();
  const built = await buildS2SPipeline(agent, {
    registry,
    sink,
    apiKey: opts.apiKey,
    logger,
    serviceOptions: opts.serviceOptions,
    face: opts.withFace === false ? undefined : (clock) => face.openSession({ configuration: { width: 192, height: 160 }, imageFormat: 'rgb' }, clock),
    tuning: { outputOptions: { sampleRate: 16_000 }, reconnectAttempts: opts.reconnectAttempts, reconnectBaseMs: opts.reconnectBaseMs ?? 50 },
  });
  const observer = new RecordingObserver();
  const worker = new PipelineWorker(built.pipeline, {
    clock: new RealClock(),
    audioOutSampleRate: 16_000,
    heartbeatMs: null,
    idleTimeoutMs: null,
    observers: [observer, ...(opts.observers?.(built) ?? [])],
    ...built.workerOptions,
  });
  const outcome = worker.run();
  t.teardown(() => worker.cancel());
  // The face is up (it loads its model on the first session) before the test speaks.
  if (opts.withFace !== false) await holdsWithin(() => sink.images.length > 0 || worker.finished, { timeoutMs: 30_000 });
  // A frame crosses several links; each is listed once, where it was first seen.
  const all = () => [...new Map(observer.events.map((e) => [e.frame.id, e.frame] as const).reverse()).values()].reverse();
  return {
    built,
    worker,
    sink,
    observer,
    logger,
    outcome,
    outOf: (name) => observer.events.filter((e) => e.source === name && e.direction === 'downstream').map((e) => e.frame),
    all,
    errors: () => all().filter((f): f is FrameOf<'error'> => f.type === 'error'),
    say(pcm) {
      for (let i = 0; i < pcm.length; i += 320) worker.queueFrame(frame('input-audio', { pcm: pcm.subarray(i, i + 320), sampleRate: 16_000, channels: 1 }));
    },
    async sayRealtime(pcm) {
      const start = Date.now();
      for (let i = 0, k = 0; i < pcm.length; i += 320, k++) {
        const due = start + k * 20 - Date.now();
        if (due > 0) await wait(due);
        worker.queueFrame(frame('input-audio', { pcm: pcm.subarray(i, i + 320), sampleRate: 16_000, channels: 1 }));
      }
    },
  };
}

/** The bot words reported heard (`tts-text`, as the output plays them), joined. */
export function heardText(s: S2SSession): string {
  return s.all().filter((f) => f.type === 'tts-text').map((f) => (f.type === 'tts-text' ? f.text : '')).join(' ');
}

/** The speech frames the avatar emitted (audio with its image's pts and type), in order. */
export function speechFrames(s: S2SSession): Array<{ pts: number; type: string; audio: Int16Array }> {
  const out = s.outOf(s.built.avatar!.name);
  const frames: Array<{ pts: number; type: string; audio: Int16Array }> = [];
  let image: Frame | undefined;
  for (const f of out) {
    if (f.type === 'output-image') image = f;
    if (f.type !== 'output-audio') continue;
    // Its picture is the last image emitted, with the same pts (other frames may pass in between).
    const paired = image?.type === 'output-image' && image.pts === f.pts ? image : undefined;
    frames.push({ pts: f.pts ?? -1, type: paired?.type === 'output-image' ? String(paired.frameType) : '?', audio: f.pcm });
  }
  return frames;
}

/**
 * Best alignment of `played` inside `reference` (both 16 kHz): the lag (samples, reference
 * index of played[0]) and the normalised correlation there, searched over `maxLagMs` each way.
 */
export function alignment(played: Int16Array, reference: Int16Array, maxLagMs = 200): { lagMs: number; correlation: number } {
  const maxLag = Math.round((maxLagMs * 16_000) / 1000);
  let best = { lag: 0, c: -1 };
  const n = Math.min(played.length, reference.length);
  for (let lag = -maxLag; lag <= maxLag; lag += 4) {
    let xy = 0, xx = 0, yy = 0;
    for (let i = 0; i < n; i += 2) {
      const j = i + lag;
      if (j < 0 || j >= reference.length) continue;
      const x = played[i]!, y = reference[j]!;
      xy += x * y; xx += x * x; yy += y * y;
    }
    const c = xx && yy ? xy / Math.sqrt(xx * yy) : 0;
    if (c > best.c) best = { lag, c };
  }
  return { lagMs: (best.lag / 16_000) * 1000, correlation: best.c };
}

export function to16k(pcm: Int16Array, rate: number): Int16Array {
  return rate === 16_000 ? pcm : resample(pcm, rate, 16_000);
}

export function concatAudio(parts: readonly Int16Array[]): Int16Array {
  const out = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}
