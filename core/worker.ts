/**
 * PipelineWorker runs a pipeline (or a bot written as a list of processors, in order): it sends the start frame, feeds frames in, ends it gracefully
 * (an end frame drains everything queued) or cancels it (at once), and reports what happens as
 * events. It also owns the session-level timers: heartbeats that measure how long a frame takes
 * to cross the pipeline, and an idle timeout that cancels a conversation nobody takes part in.
 * When it finishes, nothing it created is left running: no timers, no subscriptions.
 */
import { Subject } from 'rxjs';
import { RealClock, type Clock, type TimerHandle } from './clock.ts';
import { resolveOptions } from './options.ts';
import { frame, signal, type Frame, type FrameOf, type FrameType, type MetricsData } from './frames.ts';
import type { FrameObserver } from './observer.ts';
import { Pipeline } from './pipeline.ts';
import { FrameProcessor, type ProcessorSetup } from './processor.ts';

export const WORKER_DEFAULTS = {
  /** Sample rate of audio entering the pipeline (Hz). */
  audioInSampleRate: 16_000,
  /** Sample rate of audio the output transport plays (Hz). */
  audioOutSampleRate: 24_000,
  /** Whether user speech may interrupt the bot. */
  allowInterruptions: true,
  /** Whether services emit metrics frames. */
  enableMetrics: true,
  /** Cancel after this long without activity frames; null disables. */
  idleTimeoutMs: 5 * 60_000 as number | null,
  /** Interval between heartbeat frames; null disables. */
  heartbeatMs: 1_000 as number | null,
  /** A heartbeat slower than this across the pipeline is reported as a warning event. */
  heartbeatWarnMs: 5_000,
} as const;

/** Frames that prove the conversation is alive (reset the idle timer). */
export const DEFAULT_IDLE_ACTIVITY: readonly FrameType[] = [
  'user-started-speaking',
  'user-stopped-speaking',
  'bot-started-speaking',
  'bot-stopped-speaking',
  'transcription',
  'tts-audio',
  'output-audio',
];

export interface WorkerOptions {
  clock?: Clock;
  audioInSampleRate?: number;
  audioOutSampleRate?: number;
  allowInterruptions?: boolean;
  enableMetrics?: boolean;
  idleTimeoutMs?: number | null;
  heartbeatMs?: number | null;
  heartbeatWarnMs?: number;
  idleActivity?: readonly FrameType[];
  observers?: readonly FrameObserver[];
}

export type WorkerEvent =
  | { readonly type: 'started' }
  | { readonly type: 'error'; readonly frame: FrameOf<'error'> }
  | { readonly type: 'metrics'; readonly data: readonly MetricsData[] }
  | { readonly type: 'heartbeat'; readonly latencyMs: number; readonly slow: boolean }
  | { readonly type: 'idle-timeout' }
  | { readonly type: 'finished'; readonly outcome: WorkerOutcome };

export interface WorkerOutcome {
  readonly how: 'ended' | 'cancelled';
  readonly reason?: string;
}

/** First processor of a worker: receives what flows upstream out of the pipeline. */
class WorkerSource extends FrameProcessor {
  constructor(private readonly worker: PipelineWorker) {
    super({ name: 'WorkerSource' });
  }
  protected override process(f: Frame, direction: 'downstream' | 'upstream'): void {
    if (direction === 'downstream') this.push(f, direction);
    else this.worker.fromUpstream(f);
  }
}

/** Last processor of a worker: sees everything that reaches the end of the pipeline. */
class WorkerSink extends FrameProcessor {
  constructor(private readonly worker: PipelineWorker) {
    super({ name: 'WorkerSink' });
  }
  protected override process(f: Frame, direction: 'downstream' | 'upstream'): void {
    if (direction === 'downstream') this.worker.fromDownstream(f);
    else this.push(f, direction);
  }
}

export class PipelineWorker {
  readonly events$ = new Subject<WorkerEvent>();
  /** What runs: the pipeline given, or the one built from the list given. */
  readonly pipeline: FrameProcessor;
  readonly clock: Clock;
  private readonly options: Required<Omit<WorkerOptions, 'clock'>>;
  private readonly source: WorkerSource;
  private readonly sink: WorkerSink;
  private readonly root: Pipeline;
  private heartbeatTimer: TimerHandle | undefined;
  private idleTimer: TimerHandle | undefined;
  private readonly idleActivity: ReadonlySet<FrameType>;
  private state: 'new' | 'running' | 'ending' | 'finished' = 'new';
  private resolveRun!: (o: WorkerOutcome) => void;
  private readonly done: Promise<WorkerOutcome>;
  private endReason: string | undefined;

  constructor(pipeline: FrameProcessor | readonly FrameProcessor[], options: WorkerOptions = {}) {
    this.pipeline = isProcessorList(pipeline) ? new Pipeline(pipeline, { name: 'Bot' }) : pipeline;
    this.clock = options.clock ?? new RealClock();
    this.options = {
      ...resolveOptions(WORKER_DEFAULTS, options),
      idleActivity: options.idleActivity ?? DEFAULT_IDLE_ACTIVITY,
      observers: options.observers ?? [],
    };
    this.idleActivity = new Set(this.options.idleActivity);
    this.source = new WorkerSource(this);
    this.sink = new WorkerSink(this);
    this.root = new Pipeline([this.source, this.pipeline, this.sink], { name: 'WorkerRoot' });
    this.done = new Promise((resolve) => (this.resolveRun = resolve));
  }

  get finished(): boolean {
    return this.state === 'finished';
  }

  /** Starts the pipeline; resolves when it has ended or been cancelled. */
  run(): Promise<WorkerOutcome> {
    if (this.state !== 'new') return this.done;
    this.state = 'running';
    const setup: ProcessorSetup = { clock: this.clock, observers: this.options.observers };
    this.root.setup(setup);
    this.events$.next({ type: 'started' });
    this.source.queueFrame(
      frame('start', {
        audioInSampleRate: this.options.audioInSampleRate,
        audioOutSampleRate: this.options.audioOutSampleRate,
        allowInterruptions: this.options.allowInterruptions,
        enableMetrics: this.options.enableMetrics,
      }),
    );
    if (this.options.heartbeatMs !== null) {
      this.heartbeatTimer = this.clock.setInterval(() => this.queueFrame(frame('heartbeat', { sentAtMs: this.clock.now() })), this.options.heartbeatMs);
    }
    this.touchIdle();
    return this.done;
  }

  /** Feeds a frame into the head of the pipeline. Ignored once the worker has finished. */
  queueFrame(f: Frame): void {
    if (this.state === 'running' || (this.state === 'ending' && f.type !== 'end')) this.source.queueFrame(f);
  }

  queueFrames(frames: Iterable<Frame>): void {
    for (const f of frames) this.queueFrame(f);
  }

  /** Graceful stop: an end frame follows everything already queued. */
  end(reason?: string): Promise<WorkerOutcome> {
    if (this.state === 'running') {
      this.state = 'ending';
      this.endReason = reason;
      this.source.queueFrame(frame('end', { reason }));
    }
    return this.done;
  }

  /** Immediate stop: queued frames are dropped and in-flight work is aborted. */
  cancel(reason?: string): Promise<WorkerOutcome> {
    if (this.state === 'running' || this.state === 'ending') {
      this.source.queueFrame(frame('cancel', { reason }));
      // A processor that swallowed the cancel must not keep the worker alive.
      if (!this.finished) this.finish({ how: 'cancelled', reason });
    }
    return this.done;
  }

  /** Interrupts the bot: queued interruptible frames everywhere are dropped. */
  interrupt(): void {
    if (this.state === 'running') this.source.queueFrame(signal('interruption'));
  }

  // ---- called by the source and sink ----------------------------------------------------------

  /** @internal */
  fromUpstream(f: Frame): void {
    this.observeActivity(f);
    switch (f.type) {
      case 'error':
        this.events$.next({ type: 'error', frame: f });
        if (f.fatal) void this.cancel(`fatal error: ${f.message}`);
        return;
      case 'interruption-request':
        if (this.options.allowInterruptions) this.interrupt();
        return;
      case 'end':
        void this.end(f.reason);
        return;
      case 'cancel':
        void this.cancel(f.reason);
        return;
      case 'metrics':
        this.events$.next({ type: 'metrics', data: f.data });
        return;
      default:
        return;
    }
  }

  /** @internal */
  fromDownstream(f: Frame): void {
    this.observeActivity(f);
    switch (f.type) {
      case 'end':
        this.finish({ how: 'ended', reason: f.reason ?? this.endReason });
        return;
      case 'cancel':
        this.finish({ how: 'cancelled', reason: f.reason });
        return;
      case 'heartbeat': {
        const latencyMs = this.clock.now() - f.sentAtMs;
        this.events$.next({ type: 'heartbeat', latencyMs, slow: latencyMs > this.options.heartbeatWarnMs });
        return;
      }
      case 'metrics':
        this.events$.next({ type: 'metrics', data: f.data });
        return;
      case 'error':
        this.events$.next({ type: 'error', frame: f });
        return;
      default:
        return;
    }
  }

  private observeActivity(f: Frame): void {
    if (this.idleActivity.has(f.type)) this.touchIdle();
  }

  private touchIdle(): void {
    if (this.options.idleTimeoutMs === null || this.state === 'finished') return;
    this.clock.clearTimeout(this.idleTimer);
    this.idleTimer = this.clock.setTimeout(() => {
      this.events$.next({ type: 'idle-timeout' });
      void this.cancel('idle timeout');
    }, this.options.idleTimeoutMs);
  }

  private finish(outcome: WorkerOutcome): void {
    if (this.state === 'finished') return;
    this.state = 'finished';
    this.clock.clearInterval(this.heartbeatTimer);
    this.clock.clearTimeout(this.idleTimer);
    this.heartbeatTimer = this.idleTimer = undefined;
    this.root.cleanup();
    this.events$.next({ type: 'finished', outcome });
    this.events$.complete();
    this.resolveRun(outcome);
  }
}

function isProcessorList(p: FrameProcessor | readonly FrameProcessor[]): p is readonly FrameProcessor[] {
  return Array.isArray(p);
}
