/**
 * Observers see every frame pushed between two processors of a pipeline, without taking part
 * in processing. Use them for logging, tracing, latency measurement and debugging UIs.
 */
import type { Direction, Frame } from './frames.ts';

export interface FramePushed {
  readonly frame: Frame;
  readonly source: string;
  readonly destination: string;
  readonly direction: Direction;
  /** Clock time of the push (ms). */
  readonly timestampMs: number;
}

export interface FrameObserver {
  onFramePushed(event: FramePushed): void;
}

/** Keeps every push in memory (tests, short debugging sessions). */
export class RecordingObserver implements FrameObserver {
  readonly events: FramePushed[] = [];
  onFramePushed(event: FramePushed): void {
    this.events.push(event);
  }
}
