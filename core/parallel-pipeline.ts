/**
 * ParallelPipeline: fans every incoming frame out to several branches and merges what they emit.
 *
 * - A frame that several branches pass through unchanged leaves once (the first copy to come
 *   out wins), so branches can be added without duplicating the stream.
 * - Lifecycle frames (start, end, cancel) leave only when every branch has let them through:
 *   downstream processors never see an end while one branch is still draining.
 * - Each branch keeps its own order; frames of different branches interleave as they come out.
 */
import type { Subscription } from 'rxjs';
import type { Direction, Frame } from './frames.ts';
import { Pipeline } from './pipeline.ts';
import { FrameProcessor, type ProcessorOptions, type ProcessorSetup } from './processor.ts';

const SYNCHRONISED = new Set<Frame['type']>(['start', 'end', 'cancel']);

/** Bound on frames remembered for de-duplication; a branch may swallow frames for good. */
const MAX_TRACKED_FRAMES = 10_000;

export class ParallelPipeline extends FrameProcessor {
  readonly branches: readonly Pipeline[];
  private readonly subscriptions: Subscription[] = [];
  /** id -> copies still expected, per direction. */
  private readonly pending: Record<Direction, Map<number, number>> = {
    downstream: new Map(),
    upstream: new Map(),
  };

  constructor(branches: ReadonlyArray<readonly FrameProcessor[] | Pipeline>, options: ProcessorOptions = {}) {
    super(options);
    if (branches.length === 0) throw new Error('ParallelPipeline needs at least one branch');
    this.branches = branches.map((b) => (b instanceof Pipeline ? b : new Pipeline(b)));
    for (const b of this.branches) {
      this.subscriptions.push(b.downstream$.subscribe((f) => this.merge(f, 'downstream')));
      this.subscriptions.push(b.upstream$.subscribe((f) => this.merge(f, 'upstream')));
    }
  }

  override setup(setup: ProcessorSetup): void {
    super.setup(setup);
    for (const b of this.branches) b.setup(setup);
  }

  override cleanup(): void {
    for (const b of this.branches) b.cleanup();
    for (const s of this.subscriptions) s.unsubscribe();
    this.subscriptions.length = 0;
    this.pending.downstream.clear();
    this.pending.upstream.clear();
    super.cleanup();
  }

  override released(): Promise<void> {
    return Promise.all([super.released(), ...this.branches.map((b) => b.released())]).then(() => undefined);
  }

  override queueFrame(frame: Frame, direction: Direction = 'downstream'): void {
    const pending = this.pending[direction];
    pending.set(frame.id, this.branches.length);
    if (pending.size > MAX_TRACKED_FRAMES) pending.delete(pending.keys().next().value!);
    for (const b of this.branches) b.queueFrame(frame, direction);
  }

  private merge(frame: Frame, direction: Direction): void {
    const pending = this.pending[direction];
    const remaining = pending.get(frame.id);
    if (remaining === undefined) {
      // Created inside a branch: unique, goes straight out.
      this.push(frame, direction);
      return;
    }
    const left = remaining - 1;
    if (left <= 0) pending.delete(frame.id);
    else pending.set(frame.id, left);
    if (SYNCHRONISED.has(frame.type)) {
      if (left <= 0) this.push(frame, direction);
    } else if (remaining === this.branches.length) {
      this.push(frame, direction);
    }
  }
}
