/**
 * Metrics as frames: time to first byte per service, processing time, usage counters. A service
 * processor owns one `ProcessorMetrics` and calls start/stop around provider calls; the results
 * travel downstream as `metrics` frames so any observer or the worker can collect them.
 */
import type { Clock } from './clock.ts';
import { frame, type Frame, type MetricsData } from './frames.ts';

export interface MetricsHost {
  readonly name: string;
  now(): number;
  emit(frame: Frame): void;
  enabled(): boolean;
}

export class ProcessorMetrics {
  private ttfbStart: number | undefined;
  private processingStart: number | undefined;

  constructor(private readonly host: MetricsHost, private readonly model?: string) {}

  static for(name: string, clock: () => Clock, emit: (f: Frame) => void, enabled: () => boolean = () => true, model?: string): ProcessorMetrics {
    return new ProcessorMetrics({ name, now: () => clock().now(), emit, enabled }, model);
  }

  startTtfb(): void {
    this.ttfbStart = this.host.now();
  }

  /** Emits the TTFB once per `startTtfb` (later calls are no-ops); returns it in ms. */
  stopTtfb(): number | undefined {
    if (this.ttfbStart === undefined) return undefined;
    const valueMs = this.host.now() - this.ttfbStart;
    this.ttfbStart = undefined;
    this.send({ kind: 'ttfb', processor: this.host.name, valueMs, model: this.model });
    return valueMs;
  }

  startProcessing(): void {
    this.processingStart = this.host.now();
  }

  stopProcessing(): number | undefined {
    if (this.processingStart === undefined) return undefined;
    const valueMs = this.host.now() - this.processingStart;
    this.processingStart = undefined;
    this.send({ kind: 'processing', processor: this.host.name, valueMs, model: this.model });
    return valueMs;
  }

  usage(counters: Record<string, number>): void {
    this.send({ kind: 'usage', processor: this.host.name, counters, model: this.model });
  }

  /** Forgets timers in flight (an interrupted request has no TTFB). */
  reset(): void {
    this.ttfbStart = undefined;
    this.processingStart = undefined;
  }

  private send(data: MetricsData): void {
    if (this.host.enabled()) this.host.emit(frame('metrics', { data: [data] }));
  }
}
