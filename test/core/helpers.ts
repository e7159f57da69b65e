import { FrameProcessor, frame, type Direction, type Frame } from '../../core/index.ts';

/** Holds each text frame for `delayMs` of clock time before forwarding it; records aborts. */
export class SlowProcessor extends FrameProcessor {
  readonly aborted: string[] = [];
  readonly started: string[] = [];
  constructor(private readonly delayMs: number) {
    super();
  }
  protected override async process(f: Frame, direction: Direction, signal: AbortSignal): Promise<void> {
    if (f.type !== 'text') return this.push(f, direction);
    this.started.push(f.text);
    try {
      await this.clock.sleep(this.delayMs, signal);
    } catch (err) {
      this.aborted.push(f.text);
      throw err;
    }
    this.push(f, direction);
  }
}

export const text = (t: string, extra: { uninterruptible?: boolean } = {}) => frame('text', { text: t }, extra);
export const texts = (frames: readonly Frame[]) => frames.flatMap((f) => (f.type === 'text' ? [f.text] : []));
