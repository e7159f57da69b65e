/**
 * FrameProcessor: the unit every pipeline is built from.
 *
 * Each processor has two lanes:
 * - the system lane: system frames (start, cancel, interruption, speaking state, input audio...)
 *   are handled the moment they arrive, overtaking anything queued;
 * - the ordered lane: data and control frames are handled one at a time, in arrival order. A
 *   handler may be async; while it runs, later frames wait in the queue.
 *
 * An interruption drops queued interruptible frames and aborts the in-flight handler through its
 * AbortSignal; the lane does not wait for an aborted handler (a stuck provider call must not hold
 * the conversation), so a handler must not push after its signal aborted. A cancel drops
 * everything. Errors thrown by a handler become `error` frames pushed upstream: a processor
 * failure never crashes the pipeline.
 *
 * Plumbing is RxJS: each processor emits on two Subjects (`downstream$`, `upstream$`) that the
 * pipeline links to its neighbours.
 */
import { Subject } from 'rxjs';
import { RealClock, abortError, isAbortError, type Clock } from './clock.ts';
import {
  FRAME_CLASS,
  frame as makeFrame,
  isInterruptible,
  type Direction,
  type Frame,
  type FrameOf,
} from './frames.ts';
import type { FrameObserver } from './observer.ts';
import { errorMessage } from './error-message.ts';

export interface ProcessorSetup {
  readonly clock: Clock;
  readonly observers: readonly FrameObserver[];
}

export interface ProcessorOptions {
  /** Defaults to the class name plus a sequence number. */
  readonly name?: string;
}

type Result = void | Promise<void>;

const names = new Map<string, number>();
function defaultName(ctor: string): string {
  const n = (names.get(ctor) ?? 0) + 1;
  names.set(ctor, n);
  return `${ctor}#${n}`;
}

const sharedClock = new RealClock();

/** Abort reason of interrupted handlers: one shared instance, since building errors costs a stack capture. */
const INTERRUPTED = abortError('interrupted');

export abstract class FrameProcessor {
  readonly name: string;
  readonly downstream$ = new Subject<Frame>();
  readonly upstream$ = new Subject<Frame>();

  protected clock: Clock = sharedClock;
  protected observers: readonly FrameObserver[] = [];
  /** The start frame once seen: sample rates, interruption and metrics settings. */
  protected startFrame: FrameOf<'start'> | undefined;

  // Ordered lane: a growable ring of [frame, direction] pairs.
  private qFrames: (Frame | undefined)[] = new Array(64);
  private qDirs: Direction[] = new Array(64);
  private qHead = 0;
  private qLen = 0;
  private busy = false;
  private generation = 0;
  private controller: AbortController | undefined;
  private stopped = false;
  /** Releases still under way (a provider connection closing), awaited by `released()`. */
  private releases: Promise<unknown>[] = [];

  constructor(options: ProcessorOptions = {}) {
    this.name = options.name ?? defaultName(new.target.name);
  }

  /** Called once before the start frame, by the pipeline that owns this processor. */
  setup(setup: ProcessorSetup): void {
    this.clock = setup.clock;
    this.observers = setup.observers;
  }

  /** Releases everything; the processor is unusable afterwards. */
  cleanup(): void {
    this.stopped = true;
    this.dropQueued(() => true);
    this.controller?.abort(INTERRUPTED);
    this.downstream$.complete();
    this.upstream$.complete();
  }

  /**
   * Resolves once what this processor released asynchronously (see `releasing`) is released.
   * The runner waits for it before it reports the bot finished, so nothing is left running.
   */
  released(): Promise<void> {
    return Promise.all(this.releases).then(() => undefined);
  }

  /** Registers asynchronous release work (closing a connection on cancel); its failure is not an error. */
  protected releasing(work: Promise<unknown>): void {
    this.releases.push(work.catch(() => undefined));
  }

  /** Entry point: a neighbour (or the worker) hands a frame to this processor. */
  queueFrame(frame: Frame, direction: Direction = 'downstream'): void {
    if (this.stopped) return;
    if (FRAME_CLASS[frame.type] === 'system') {
      this.handleSystem(frame, direction);
    } else if (!this.busy && this.qLen === 0) {
      this.runOrdered(frame, direction);
    } else {
      this.enqueue(frame, direction);
    }
  }

  /** Sends a frame to the next processor (downstream) or the previous one (upstream). */
  push(frame: Frame, direction: Direction = 'downstream'): void {
    if (direction === 'downstream') this.downstream$.next(frame);
    else this.upstream$.next(frame);
  }

  /** Pushes an error frame upstream (towards the worker, which reports it). */
  pushError(message: string, options: { fatal?: boolean; code?: string; cause?: unknown } = {}): void {
    this.push(
      makeFrame('error', { message, fatal: options.fatal ?? false, processor: this.name, code: options.code, cause: options.cause }),
      'upstream',
    );
  }

  /** Frames waiting in the ordered lane (for tests and diagnostics). */
  get queuedFrames(): number {
    return this.qLen;
  }

  /**
   * Handles one frame. The default forwards it unchanged; subclasses switch on `frame.type`,
   * handle what they own and call `super.process` (or `push`) for the rest.
   */
  protected process(frame: Frame, direction: Direction, _signal: AbortSignal): Result {
    this.push(frame, direction);
  }

  /** Lifecycle hooks, run before `process` sees the frame. `onStart` may be async: ordered frames wait for it. */
  protected onStart(_frame: FrameOf<'start'>): Result {}
  protected onEnd(_frame: FrameOf<'end'>): Result {}
  protected onCancel(_frame: FrameOf<'cancel'>): void {}
  protected onInterruption(): void {}

  /** True while interruptions are allowed by the start frame. */
  protected get interruptionsAllowed(): boolean {
    return this.startFrame?.allowInterruptions ?? true;
  }

  // ---- lanes --------------------------------------------------------------------------------

  private handleSystem(frame: Frame, direction: Direction): void {
    switch (frame.type) {
      case 'start':
        if (direction === 'upstream') {
          this.safely(frame, direction);
          return;
        }
        this.startFrame = frame;
        // Start is handled through the ordered machinery so queued frames wait for an async setup.
        if (!this.busy && this.qLen === 0) this.runOrdered(frame, direction);
        else this.enqueueFront(frame, direction);
        return;
      case 'cancel':
        if (direction === 'upstream') {
          this.safely(frame, direction);
          return;
        }
        this.dropQueued(() => true);
        this.abortInFlight();
        this.onCancel(frame);
        this.safely(frame, direction);
        this.stopped = true;
        return;
      case 'interruption':
        this.dropQueued(isInterruptible);
        this.abortInFlight();
        this.onInterruption();
        this.safely(frame, direction);
        if (!this.busy) this.drain();
        return;
      default:
        this.safely(frame, direction);
    }
  }

  private safely(frame: Frame, direction: Direction): void {
    let r: Result;
    try {
      r = this.process(frame, direction, this.signal);
    } catch (err) {
      this.reportError(err);
      return;
    }
    if (r) r.catch((err) => this.reportError(err));
  }

  private runOrdered(first: Frame, firstDir: Direction): void {
    let frame: Frame | undefined = first;
    let direction = firstDir;
    while (frame) {
      this.busy = true;
      let r: Result;
      try {
        r = this.dispatch(frame, direction, this.signal);
      } catch (err) {
        this.reportError(err);
        r = undefined;
      }
      if (r) {
        const generation = this.generation;
        r.then(
          () => this.settle(generation),
          (err) => {
            if (generation === this.generation) this.reportError(err);
            this.settle(generation);
          },
        );
        return;
      }
      this.busy = false;
      if (this.qLen === 0 || this.stopped) return;
      direction = this.qDirs[this.qHead]!;
      frame = this.dequeue();
    }
  }

  private dispatch(frame: Frame, direction: Direction, signal: AbortSignal): Result {
    let hook: Result;
    // Lifecycle hooks run for frames on their way down only: an `end` travelling upstream is a
    // request to end (e.g. a hang-up tool), not the end itself.
    if (direction === 'upstream') return this.process(frame, direction, signal);
    switch (frame.type) {
      case 'start':
        hook = this.onStart(frame);
        break;
      case 'end':
        hook = this.onEnd(frame);
        break;
      default:
        return this.process(frame, direction, signal);
    }
    // A failing hook is reported, and the lifecycle frame still travels on: one processor's
    // failed setup must not leave the rest of the pipeline waiting for a start that never comes.
    if (hook) {
      return hook.then(
        () => this.process(frame, direction, signal),
        (err) => {
          this.reportError(err);
          return this.process(frame, direction, signal);
        },
      );
    }
    return this.process(frame, direction, signal);
  }

  private settle(generation: number): void {
    // A handler abandoned by an interruption settles late; the lane has moved on without it.
    if (generation !== this.generation) return;
    this.busy = false;
    this.drain();
  }

  private drain(): void {
    if (this.qLen === 0 || this.stopped) return;
    const direction = this.qDirs[this.qHead]!;
    this.runOrdered(this.dequeue()!, direction);
  }

  private abortInFlight(): void {
    this.generation++;
    this.busy = false;
    // Controllers are created lazily: most frames are handled by code that never looks at the
    // signal, and creating/aborting AbortControllers is not free.
    if (this.controller) {
      this.controller.abort(INTERRUPTED);
      this.controller = undefined;
    }
  }

  private get signal(): AbortSignal {
    return (this.controller ??= new AbortController()).signal;
  }

  private reportError(err: unknown): void {
    if (isAbortError(err) || this.stopped) return;
    const message = errorMessage(err);
    this.pushError(message, { cause: err });
  }

  // ---- ring buffer --------------------------------------------------------------------------

  private enqueue(frame: Frame, direction: Direction): void {
    if (this.qLen === this.qFrames.length) this.grow();
    const i = (this.qHead + this.qLen) % this.qFrames.length;
    this.qFrames[i] = frame;
    this.qDirs[i] = direction;
    this.qLen++;
  }

  private enqueueFront(frame: Frame, direction: Direction): void {
    if (this.qLen === this.qFrames.length) this.grow();
    this.qHead = (this.qHead - 1 + this.qFrames.length) % this.qFrames.length;
    this.qFrames[this.qHead] = frame;
    this.qDirs[this.qHead] = direction;
    this.qLen++;
  }

  private dequeue(): Frame | undefined {
    const f = this.qFrames[this.qHead];
    this.qFrames[this.qHead] = undefined;
    this.qHead = (this.qHead + 1) % this.qFrames.length;
    this.qLen--;
    return f;
  }

  private grow(): void {
    const size = this.qFrames.length * 2;
    const frames: (Frame | undefined)[] = new Array(size);
    const dirs: Direction[] = new Array(size);
    for (let k = 0; k < this.qLen; k++) {
      const i = (this.qHead + k) % this.qFrames.length;
      frames[k] = this.qFrames[i];
      dirs[k] = this.qDirs[i]!;
    }
    this.qFrames = frames;
    this.qDirs = dirs;
    this.qHead = 0;
  }

  private dropQueued(shouldDrop: (f: Frame) => boolean): void {
    if (this.qLen === 0) return;
    // Compact the ring in place: kept frames slide towards the head, keeping their order.
    const size = this.qFrames.length;
    let kept = 0;
    for (let k = 0; k < this.qLen; k++) {
      const i = (this.qHead + k) % size;
      const f = this.qFrames[i]!;
      this.qFrames[i] = undefined;
      if (!shouldDrop(f)) {
        const j = (this.qHead + kept) % size;
        this.qFrames[j] = f;
        this.qDirs[j] = this.qDirs[i]!;
        kept++;
      }
    }
    this.qLen = kept;
  }
}

/** A processor that forwards everything; handy as a base and in tests. */
export class PassThroughProcessor extends FrameProcessor {}
