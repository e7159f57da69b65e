/**
 * Pipeline: processors linked in a chain. Downstream frames enter at the head and leave at the
 * tail; upstream frames enter at the tail and leave at the head. A pipeline is itself a
 * processor, so pipelines nest; it queues nothing of its own, it only routes.
 */
import type { Subscription } from 'rxjs';
import type { Direction, Frame } from './frames.ts';
import { FrameProcessor, type ProcessorOptions, type ProcessorSetup } from './processor.ts';

/** Links `a -> b`: a's downstream output feeds b, b's upstream output feeds a. */
export function link(a: FrameProcessor, b: FrameProcessor, observe: () => ProcessorSetup | undefined): Subscription {
  const down = a.downstream$.subscribe((f) => {
    const setup = observe();
    if (setup && setup.observers.length) notify(setup, f, a, b, 'downstream');
    b.queueFrame(f, 'downstream');
  });
  down.add(
    b.upstream$.subscribe((f) => {
      const setup = observe();
      if (setup && setup.observers.length) notify(setup, f, b, a, 'upstream');
      a.queueFrame(f, 'upstream');
    }),
  );
  return down;
}

function notify(setup: ProcessorSetup, frame: Frame, from: FrameProcessor, to: FrameProcessor, direction: Direction): void {
  const event = { frame, source: from.name, destination: to.name, direction, timestampMs: setup.clock.now() };
  for (const o of setup.observers) o.onFramePushed(event);
}

export class Pipeline extends FrameProcessor {
  readonly processors: readonly FrameProcessor[];
  private readonly links: Subscription[] = [];
  private setupInfo: ProcessorSetup | undefined;

  constructor(processors: readonly FrameProcessor[], options: ProcessorOptions = {}) {
    super(options);
    this.processors = [...processors];
    const current = () => this.setupInfo;
    for (let i = 0; i + 1 < this.processors.length; i++) {
      this.links.push(link(this.processors[i]!, this.processors[i + 1]!, current));
    }
    const head = this.processors[0];
    const tail = this.processors[this.processors.length - 1];
    if (head && tail) {
      this.links.push(head.upstream$.subscribe((f) => this.upstream$.next(f)));
      this.links.push(tail.downstream$.subscribe((f) => this.downstream$.next(f)));
    }
  }

  override setup(setup: ProcessorSetup): void {
    super.setup(setup);
    this.setupInfo = setup;
    for (const p of this.processors) p.setup(setup);
  }

  override cleanup(): void {
    for (const p of this.processors) p.cleanup();
    for (const l of this.links) l.unsubscribe();
    this.links.length = 0;
    super.cleanup();
  }

  override queueFrame(frame: Frame, direction: Direction = 'downstream'): void {
    const n = this.processors.length;
    if (n === 0) {
      this.push(frame, direction);
    } else if (direction === 'downstream') {
      this.processors[0]!.queueFrame(frame, direction);
    } else {
      this.processors[n - 1]!.queueFrame(frame, direction);
    }
  }

  override released(): Promise<void> {
    return Promise.all([super.released(), ...this.processors.map((p) => p.released())]).then(() => undefined);
  }

  /** Every processor in this pipeline and the pipelines nested in it, depth first. */
  *allProcessors(): Generator<FrameProcessor> {
    for (const p of this.processors) {
      yield p;
      if (p instanceof Pipeline) yield* p.allProcessors();
    }
  }
}
