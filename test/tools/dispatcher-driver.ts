/**
 * Interactive version of core/testing's runProcessorTest for the tool dispatcher: the same
 * capture points above and below the processor inside a real PipelineWorker, but steps are
 * driven by the test one at a time, so a test can wait for a real HTTP server between frames.
 */
import { RealClock, type Clock } from '../../core/clock.ts';
import { describeFrame, frame, signal, type Frame, type FrameType } from '../../core/frames.ts';
import { Pipeline } from '../../core/pipeline.ts';
import { FrameProcessor } from '../../core/processor.ts';
import { CaptureProcessor, VirtualClock } from '../../core/testing/index.ts';
import { PipelineWorker, type WorkerOutcome } from '../../core/worker.ts';
import type { ToolLogger } from '../../processors/tools/tool-logger.ts';
import { until } from '../../testing/until.ts';

class UpstreamInjector extends FrameProcessor {
  inject(f: Frame): void {
    this.push(f, 'upstream');
  }
}

/** Lifecycle noise left out of captures; `end` is kept so a hang-up request is visible. */
const IGNORED: readonly FrameType[] = ['start', 'heartbeat', 'metrics'];

export interface DispatcherRun {
  readonly downstream: Frame[];
  readonly upstream: Frame[];
  readonly worker: PipelineWorker;
  outcome(): WorkerOutcome | undefined;
  /** Feeds a frame in above the dispatcher (as the LLM would). */
  send(f: Frame): Promise<void>;
  /** Feeds a frame in below the dispatcher, travelling upstream (as the output transport would). */
  sendUpstream(f: Frame): Promise<void>;
  /** Waits (real or virtual time) until `predicate` holds; throws with the captures if it never does. */
  waitFor(predicate: () => boolean, label: string, maxMs?: number): Promise<void>;
  /** Gives pending callbacks a chance to run. */
  settle(ms?: number): Promise<void>;
  stop(): Promise<void>;
}

export async function runDispatcher(processor: FrameProcessor, clock: Clock = new RealClock()): Promise<DispatcherRun> {
  const ignore = new Set(IGNORED);
  const above = new CaptureProcessor('upstream', ignore);
  const below = new CaptureProcessor('downstream', ignore);
  const injector = new UpstreamInjector({ name: 'UpstreamInjector' });
  const worker = new PipelineWorker(new Pipeline([above, processor, below, injector]), {
    clock,
    idleTimeoutMs: null,
    heartbeatMs: null,
  });
  let outcome: WorkerOutcome | undefined;
  void worker.run().then((o) => (outcome = o));

  const settle = async (ms = 0) => {
    if (clock instanceof VirtualClock) await clock.advance(ms);
    else await new Promise((resolve) => setTimeout(resolve, ms));
  };
  const dump = () =>
    `\n  downstream: ${below.frames.map(describeFrame).join(', ')}\n  upstream: ${above.frames.map(describeFrame).join(', ')}`;

  await settle();
  return {
    downstream: below.frames,
    upstream: above.frames,
    worker,
    outcome: () => outcome,
    async send(f) {
      worker.queueFrame(f);
      await settle();
    },
    async sendUpstream(f) {
      injector.inject(f);
      await settle();
    },
    async waitFor(predicate, label, maxMs = 10_000) {
      if (clock instanceof VirtualClock) {
        if (!(await clock.advanceUntil(predicate, maxMs))) throw new Error(`timed out waiting for ${label}${dump()}`);
        return;
      }
      await until(predicate, { timeoutMs: maxMs, intervalMs: 5, what: () => `${label}${dump()}` });
    },
    settle,
    async stop() {
      if (!worker.finished) await worker.cancel('test over');
    },
  };
}

export function toolCalls(responseId: string, ...calls: [id: string, name: string, args: unknown][]): Frame {
  return frame('tool-calls', {
    responseId,
    calls: calls.map(([toolCallId, name, args]) => ({
      toolCallId,
      name,
      arguments: typeof args === 'string' ? args : JSON.stringify(args),
    })),
  });
}

/** The frames an LLM processor emits around one response. */
export function response(responseId: string, text: string, ...calls: [id: string, name: string, args: unknown][]): Frame[] {
  return [
    frame('llm-response-start', { responseId }),
    ...(text ? [frame('llm-text', { text })] : []),
    ...(calls.length ? [toolCalls(responseId, ...calls)] : []),
    frame('llm-response-end', { responseId }),
  ];
}

export const userStarted = () => signal('user-started-speaking');
export const userStopped = () => signal('user-stopped-speaking');
export const botStarted = () => signal('bot-started-speaking');
export const botStopped = () => signal('bot-stopped-speaking');
export const interruption = () => signal('interruption');

export function ofType<T extends FrameType>(frames: readonly Frame[], type: T): Extract<Frame, { type: T }>[] {
  return frames.filter((f): f is Extract<Frame, { type: T }> => f.type === type);
}

export interface LogEntry {
  readonly level: 'info' | 'warn';
  readonly fields: Record<string, unknown>;
  readonly message: string;
}

export function captureLogger(): ToolLogger & { readonly entries: LogEntry[] } {
  const entries: LogEntry[] = [];
  return {
    entries,
    info: (fields, message) => entries.push({ level: 'info', fields, message }),
    warn: (fields, message) => entries.push({ level: 'warn', fields, message }),
  };
}
