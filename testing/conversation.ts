/**
 * A conversation harness: a pipeline under test in a worker on the virtual clock, driven by
 * steps of speech and time, with every frame between two processors recorded. It replaces the
 * set-up each conversation test used to write for itself (clock, worker, 20 ms input chunks,
 * outcome, loopback pauses).
 *
 * Time is virtual. Two kinds of real work do not follow it, and the harness waits for them:
 * - sockets (a vendor plugin talking to a local fake of its vendor): `realPauseMs` real
 *   milliseconds are yielded after every virtual step so loopback messages arrive;
 * - engines running in real time elsewhere (a synthesis worker thread): while `busy()` holds,
 *   a step waits in real time (up to `maxBusyWaitMs`) before virtual time moves on, so the output
 *   does not run dry because the test's clock outran the engine.
 */
import { chunkAudio } from '../core/audio.ts';
import { VirtualClock } from '../core/clock.ts';
import { resolveOptions, type Resolved } from '../core/options.ts';
import { describeFrame, frame, type Frame, type FrameType } from '../core/frames.ts';
import { RecordingObserver, type FramePushed } from '../core/observer.ts';
import type { FrameProcessor } from '../core/processor.ts';
import { PipelineWorker, type WorkerEvent, type WorkerOptions, type WorkerOutcome } from '../core/worker.ts';

export const CONVERSATION_DEFAULTS = {
  /** Input and output sample rate of the worker. */
  sampleRate: 16_000,
  /** Input audio is queued in chunks of this length, one per virtual step (what a transport does). */
  chunkMs: 20,
  /** Virtual time per step while the harness waits for real work. */
  stepMs: 20,
  /** Real time yielded per step: 0 when everything runs on the virtual clock. */
  realPauseMs: 0,
  /** Longest real wait per step while `busy()` holds. */
  maxBusyWaitMs: 200,
} as const;

export interface ConversationOptions {
  /** The pipeline under test: a processor (a `Pipeline` is one) or a list of them, in order. */
  readonly pipeline: FrameProcessor | readonly FrameProcessor[];
  readonly clock?: VirtualClock;
  readonly sampleRate?: number;
  /** Further worker options; heartbeats and the idle timeout are off unless set here. */
  readonly worker?: Omit<WorkerOptions, 'clock' | 'audioInSampleRate' | 'audioOutSampleRate'>;
  readonly chunkMs?: number;
  readonly stepMs?: number;
  readonly realPauseMs?: number;
  readonly busy?: () => boolean;
  readonly maxBusyWaitMs?: number;
}

/** A step of a scripted conversation. */
export type ConversationStep =
  /** User audio (mono int16 at the worker's input rate), fed in real (virtual) time. */
  | { readonly say: Int16Array }
  /** Let this much virtual time pass. */
  | { readonly sleepMs: number }
  /** Queue a frame at the top of the pipeline. */
  | { readonly frame: Frame }
  /** Let time pass until `until` holds; fails the conversation if it does not within `withinMs`. */
  | { readonly until: () => boolean; readonly withinMs: number; readonly what: string };

export class ConversationExpectationError extends Error {
  readonly code = 'conversation_expectation';
  constructor(message: string) {
    super(message);
    this.name = 'ConversationExpectationError';
  }
}

export class Conversation {
  readonly clock: VirtualClock;
  readonly worker: PipelineWorker;
  /** Every frame pushed between two processors, with its source and destination. */
  readonly recorder = new RecordingObserver();
  readonly events: WorkerEvent[] = [];
  private finishedWith: WorkerOutcome | undefined;
  /** CONVERSATION_DEFAULTS with the caller's options over them. */
  private readonly settings: Resolved<typeof CONVERSATION_DEFAULTS>;
  private readonly busy: (() => boolean) | undefined;

  private constructor(options: ConversationOptions) {
    this.clock = options.clock ?? new VirtualClock();
    this.settings = resolveOptions(CONVERSATION_DEFAULTS, options);
    this.busy = options.busy;
    this.worker = new PipelineWorker(options.pipeline, {
      heartbeatMs: null,
      idleTimeoutMs: null,
      ...options.worker,
      observers: [this.recorder, ...(options.worker?.observers ?? [])],
      clock: this.clock,
      audioInSampleRate: this.settings.sampleRate,
      audioOutSampleRate: this.settings.sampleRate,
    });
    this.worker.events$.subscribe((e) => this.events.push(e));
  }

  /** Starts the worker and lets the start frame through. */
  static async start(options: ConversationOptions): Promise<Conversation> {
    const conversation = new Conversation(options);
    void conversation.worker.run().then((o) => (conversation.finishedWith = o));
    await conversation.clock.advance(0);
    return conversation;
  }

  /** How the worker finished, once it has. */
  get outcome(): WorkerOutcome | undefined {
    return this.finishedWith;
  }

  /** One virtual step, then the real pauses the options ask for. */
  async step(ms = this.settings.stepMs): Promise<void> {
    if (this.busy) {
      const start = performance.now();
      while (this.busy() && performance.now() - start < this.settings.maxBusyWaitMs) await realPause(1);
    }
    await this.clock.advance(ms);
    if (this.settings.realPauseMs > 0) await realPause(this.settings.realPauseMs);
  }

  /** Lets `ms` of virtual time pass (in steps when real work has to keep up). */
  async advance(ms: number): Promise<void> {
    if (this.settings.realPauseMs === 0 && !this.busy) return this.clock.advance(ms);
    for (let passed = 0; passed < ms; passed += this.settings.stepMs) await this.step(Math.min(this.settings.stepMs, ms - passed));
  }

  /** Feeds user audio in chunks, one chunk per chunk of virtual time. */
  async say(pcm: Int16Array): Promise<void> {
    for (const chunk of chunkAudio(pcm, this.settings.sampleRate, this.settings.chunkMs)) {
      this.worker.queueFrame(frame('input-audio', { pcm: chunk, sampleRate: this.settings.sampleRate, channels: 1 }));
      await this.step(this.settings.chunkMs);
    }
  }

  /** Lets time pass until `predicate` holds or `maxMs` of virtual time passed; says which. */
  async settle(predicate: () => boolean, maxMs: number): Promise<boolean> {
    if (this.settings.realPauseMs === 0 && !this.busy) return this.clock.advanceUntil(predicate, maxMs);
    for (let passed = 0; passed < maxMs && !predicate(); passed += this.settings.stepMs) await this.step();
    return predicate();
  }

  /** Like `settle`, but throws a `ConversationExpectationError` naming `what` when it does not hold. */
  async expect(predicate: () => boolean, withinMs: number, what: string): Promise<void> {
    if (!(await this.settle(predicate, withinMs))) {
      throw new ConversationExpectationError(`expected ${what} within ${withinMs} ms of virtual time (at ${this.clock.now()} ms)`);
    }
  }

  /** Plays scripted steps in order. */
  async play(steps: readonly ConversationStep[]): Promise<void> {
    for (const s of steps) {
      if ('say' in s) await this.say(s.say);
      else if ('sleepMs' in s) await this.advance(s.sleepMs);
      else if ('frame' in s) {
        this.worker.queueFrame(s.frame);
        await this.clock.advance(0);
      } else await this.expect(s.until, s.withinMs, s.what);
    }
  }

  /**
   * Frames pushed by the processor named `source` to its neighbour (optionally of one type, one
   * direction). Observers see the links between processors, so what the last processor of a
   * list pushes out of the bottom is seen as pushed by the list's pipeline, named `Bot`.
   */
  framesFrom<T extends FrameType>(source: string, type?: T, direction: 'downstream' | 'upstream' = 'downstream'): Frame[] {
    return this.pushes(type)
      .filter((e) => e.source === source && e.direction === direction)
      .map((e) => e.frame);
  }

  /** Every push of a frame type (all hops), or every push. */
  pushes(type?: FrameType): FramePushed[] {
    return type ? this.recorder.events.filter((e) => e.frame.type === type) : this.recorder.events;
  }

  /** Throws a readable error when the frames `source` pushed downstream are not `expected` (types, in order, ignoring `ignore`). */
  expectFramesFrom(source: string, expected: readonly FrameType[], ignore: readonly FrameType[] = []): void {
    const frames = this.framesFrom(source).filter((f) => !ignore.includes(f.type));
    const got = frames.map((f) => f.type);
    if (got.length !== expected.length || got.some((t, i) => t !== expected[i])) {
      throw new ConversationExpectationError(
        `${source} pushed [${got.join(', ')}]\n  expected [${expected.join(', ')}]\n  ${frames.map(describeFrame).join('\n  ')}`,
      );
    }
  }

  /** Ends gracefully (end frame) and waits, in virtual time, for the worker to finish. */
  async end(reason?: string, withinMs = 60_000): Promise<WorkerOutcome | undefined> {
    void this.worker.end(reason);
    await this.settle(() => this.finishedWith !== undefined, withinMs);
    return this.finishedWith;
  }

  /** Stops now (cancel frame). */
  async cancel(reason?: string): Promise<void> {
    await this.worker.cancel(reason);
  }
}

function realPause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
