/**
 * Test harness for processors, shipped with the framework so plugin authors test the way we do:
 * frames in, frames out in both directions, on a virtual clock (tests of real-time behaviour run
 * faster than real time and never sleep). Runner-agnostic: failures throw plain Errors.
 */
import { VirtualClock } from '../clock.ts';
import { resolveOptions } from '../options.ts';
import { describeFrame, type Frame, type FrameType } from '../frames.ts';
import { FrameProcessor } from '../processor.ts';
import { Pipeline } from '../pipeline.ts';
import { PipelineWorker, type WorkerEvent, type WorkerOptions, type WorkerOutcome } from '../worker.ts';

/** Frame types the harness leaves out of captures unless asked (lifecycle noise). */
export const HARNESS_IGNORED: readonly FrameType[] = ['start', 'end', 'heartbeat', 'metrics'];

export const PROCESSOR_TEST_DEFAULTS = {
  /** Send an end frame after the steps and wait for it to drain. */
  sendEnd: true,
  /** Virtual time allowed for the end frame to drain (virtual: a generous bound costs no real time). */
  drainMs: 60_000,
  /** Frame types left out of the captures. */
  ignore: HARNESS_IGNORED as readonly FrameType[],
} as const;

/** A step of a scripted test: a frame to send, or time to let pass on the virtual clock. */
export type TestStep = Frame | { readonly sleepMs: number } | { readonly upstream: Frame };

export interface ProcessorTestOptions extends Omit<WorkerOptions, 'clock'> {
  readonly clock?: VirtualClock;
  /** Defaults in PROCESSOR_TEST_DEFAULTS. */
  readonly sendEnd?: boolean;
  readonly drainMs?: number;
  readonly ignore?: readonly FrameType[];
}

export interface ProcessorTestResult {
  /** Frames that came out of the bottom of the processor, in order. */
  readonly downstream: Frame[];
  /** Frames that came out of the top of the processor, in order. */
  readonly upstream: Frame[];
  readonly events: WorkerEvent[];
  readonly outcome: WorkerOutcome | undefined;
  readonly clock: VirtualClock;
}

/** Records what reaches it in one direction and lets everything through. */
export class CaptureProcessor extends FrameProcessor {
  readonly frames: Frame[] = [];
  constructor(private readonly direction: 'downstream' | 'upstream', private readonly ignore: ReadonlySet<FrameType>) {
    super({ name: `Capture(${direction})` });
  }
  protected override process(f: Frame, direction: 'downstream' | 'upstream'): void {
    if (direction === this.direction && !this.ignore.has(f.type)) this.frames.push(f);
    this.push(f, direction);
  }
}

/** Injects frames upstream from below the processor under test. */
class UpstreamInjector extends FrameProcessor {
  inject(f: Frame): void {
    this.push(f, 'upstream');
  }
}

/**
 * Runs `processor` inside a worker with capture points above and below it, sends the steps,
 * then (by default) ends the pipeline and waits for the end frame to drain.
 */
export async function runProcessorTest(
  processor: FrameProcessor,
  steps: readonly TestStep[],
  options: ProcessorTestOptions = {},
): Promise<ProcessorTestResult> {
  const clock = options.clock ?? new VirtualClock();
  const { sendEnd, drainMs, ignore: ignored } = resolveOptions(PROCESSOR_TEST_DEFAULTS, options);
  const ignore = new Set(ignored);
  const above = new CaptureProcessor('upstream', ignore);
  const below = new CaptureProcessor('downstream', ignore);
  const injector = new UpstreamInjector({ name: 'UpstreamInjector' });
  const worker = new PipelineWorker(new Pipeline([above, processor, below, injector]), {
    idleTimeoutMs: null,
    heartbeatMs: null,
    ...options,
    clock,
  });
  const events: WorkerEvent[] = [];
  worker.events$.subscribe((e) => events.push(e));
  let outcome: WorkerOutcome | undefined;
  void worker.run().then((o) => (outcome = o));
  await clock.advance(0);
  for (const step of steps) {
    if ('sleepMs' in step) await clock.advance(step.sleepMs);
    else if ('upstream' in step) injector.inject(step.upstream);
    else worker.queueFrame(step);
  }
  await clock.advance(0);
  if (sendEnd) {
    void worker.end();
    await clock.advanceUntil(() => outcome !== undefined, drainMs);
  }
  return { downstream: below.frames, upstream: above.frames, events, outcome, clock };
}

export function frameTypes(frames: readonly Frame[]): FrameType[] {
  return frames.map((f) => f.type);
}

/** Throws a readable error when the frame types differ from `expected`. */
export function expectFrameTypes(actual: readonly Frame[], expected: readonly FrameType[], label = 'frames'): void {
  const got = frameTypes(actual);
  const same = got.length === expected.length && got.every((t, i) => t === expected[i]);
  if (!same) {
    throw new Error(
      `${label}: expected [${expected.join(', ')}]\n  but got [${got.join(', ')}]\n  ${actual.map(describeFrame).join('\n  ')}`,
    );
  }
}

export { VirtualClock };
