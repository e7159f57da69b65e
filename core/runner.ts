/**
 * The runner of a bot written as a list of processors, in order (input transport, VAD, STT, user
 * turns, LLM, TTS, avatar, output transport, assistant turns):
 *
 *     const outcome = await runBot([input, ...voice.processors], { handleSignals: true });
 *
 * It owns the bot's life from start to teardown, so a bot author writes none of it:
 *
 * - start: builds the pipeline from the list and runs it on a `PipelineWorker` (the start frame
 *   carries the sample rates and `allowInterruptions`, the one owner of that setting);
 * - end: `end()` lets everything queued play out; if that takes longer than `endTimeoutMs` (a
 *   processor stuck on its last frame) the bot is cancelled;
 * - cancel: `cancel()`, or aborting the `signal` the caller passed, stops at once;
 * - process signals, only when asked (`handleSignals`; a library does not take a process's
 *   signals unasked): the first SIGINT/SIGTERM ends gracefully, a second one cancels;
 * - teardown: when the worker finishes (ended, cancelled, a fatal error, the idle timeout), every
 *   processor has been cleaned up; the runner waits for what processors release asynchronously
 *   (`FrameProcessor.released()`: a provider connection closing, bounded by `releaseTimeoutMs`)
 *   and removes what it added (signal and abort listeners, its timers) before `run()` resolves:
 *   nothing the bot started is left running, so a bot script exits on its own.
 */
import { RealClock, type TimerHandle } from './clock.ts';
import type { Frame } from './frames.ts';
import { resolveOptions } from './options.ts';
import type { FrameProcessor } from './processor.ts';
import { PipelineWorker, type WorkerEvent, type WorkerOptions, type WorkerOutcome } from './worker.ts';

export const RUNNER_DEFAULTS = {
  /** A graceful end that has not finished after this long is cancelled; null waits for ever. */
  endTimeoutMs: 10_000 as number | null,
  /**
   * How long `run()` waits, once the bot has finished, for processors to release what they close
   * asynchronously (a provider connection closing after a cancel).
   */
  releaseTimeoutMs: 5_000,
} as const;

/** The process signals `handleSignals: true` stands for. */
export const RUNNER_SIGNALS: readonly NodeJS.Signals[] = ['SIGINT', 'SIGTERM'];

export interface RunnerOptions extends WorkerOptions {
  /** Aborting it cancels the bot, with the signal's reason (a string) or "aborted". */
  readonly signal?: AbortSignal;
  /**
   * End the bot on process signals: `true` for SIGINT and SIGTERM, or the list to handle. The
   * first ends gracefully, the second cancels. Default: off.
   */
  readonly handleSignals?: boolean | readonly NodeJS.Signals[];
  readonly endTimeoutMs?: number | null;
  readonly releaseTimeoutMs?: number;
  /** Every worker event (errors, metrics, heartbeats, idle timeout, finished), as it happens. */
  readonly onEvent?: (event: WorkerEvent) => void;
}

export class PipelineRunner {
  readonly worker: PipelineWorker;
  private readonly endTimeoutMs: number | null;
  private readonly releaseTimeoutMs: number;
  private readonly cleanups: (() => void)[] = [];
  private endTimer: TimerHandle | undefined;
  private running: Promise<WorkerOutcome> | undefined;

  constructor(
    processors: FrameProcessor | readonly FrameProcessor[],
    private readonly options: RunnerOptions = {},
  ) {
    ({ endTimeoutMs: this.endTimeoutMs, releaseTimeoutMs: this.releaseTimeoutMs } = resolveOptions(RUNNER_DEFAULTS, options));
    this.worker = new PipelineWorker(processors, { ...options, clock: options.clock ?? new RealClock() });
  }

  /** Starts the bot; resolves with how it finished, once everything is torn down. */
  run(): Promise<WorkerOutcome> {
    this.running ??= this.start();
    return this.running;
  }

  /** Feeds a frame into the head of the bot (what an input transport does). */
  queueFrame(f: Frame): void {
    this.worker.queueFrame(f);
  }

  /** Graceful stop: what is queued plays out first (bounded by `endTimeoutMs`). */
  end(reason?: string): Promise<WorkerOutcome> {
    if (!this.worker.finished && this.endTimer === undefined && this.endTimeoutMs !== null) {
      this.endTimer = this.worker.clock.setTimeout(() => void this.worker.cancel(`${reason ?? 'end'}: did not finish within ${this.endTimeoutMs} ms`), this.endTimeoutMs);
    }
    return this.worker.end(reason);
  }

  /** Immediate stop. */
  cancel(reason?: string): Promise<WorkerOutcome> {
    return this.worker.cancel(reason);
  }

  interrupt(): void {
    this.worker.interrupt();
  }

  /** Waits for the processors' asynchronous releases, bounded by `releaseTimeoutMs`. */
  private async released(): Promise<void> {
    let timer: TimerHandle | undefined;
    const bound = new Promise<void>((resolve) => (timer = this.worker.clock.setTimeout(resolve, this.releaseTimeoutMs)));
    try {
      await Promise.race([this.worker.pipeline.released(), bound]);
    } finally {
      this.worker.clock.clearTimeout(timer);
    }
  }

  private async start(): Promise<WorkerOutcome> {
    const { signal, onEvent } = this.options;
    if (onEvent) {
      const sub = this.worker.events$.subscribe(onEvent);
      this.cleanups.push(() => sub.unsubscribe());
    }
    const done = this.worker.run();
    if (signal) {
      const onAbort = () => void this.cancel(typeof signal.reason === 'string' ? signal.reason : 'aborted');
      if (signal.aborted) onAbort();
      else {
        signal.addEventListener('abort', onAbort, { once: true });
        this.cleanups.push(() => signal.removeEventListener('abort', onAbort));
      }
    }
    const handled = this.options.handleSignals === true ? RUNNER_SIGNALS : this.options.handleSignals || [];
    let signalled = false;
    for (const name of handled) {
      const onSignal = () => {
        if (signalled) return void this.cancel(name);
        signalled = true;
        void this.end(name);
      };
      process.on(name, onSignal);
      this.cleanups.push(() => process.off(name, onSignal));
    }
    try {
      const outcome = await done;
      await this.released();
      return outcome;
    } finally {
      this.worker.clock.clearTimeout(this.endTimer);
      for (const cleanup of this.cleanups.splice(0)) cleanup();
    }
  }
}

/** Runs a bot written as a list of processors (or one pipeline) until it ends; see `PipelineRunner`. */
export function runBot(processors: FrameProcessor | readonly FrameProcessor[], options: RunnerOptions = {}): Promise<WorkerOutcome> {
  return new PipelineRunner(processors, options).run();
}
