/**
 * What a process's load looks like over the last one to two windows: its event loop's utilization
 * and lag, its CPU share, how late its live sessions' face frames left, and how many REST requests
 * it served. Two readers judge from it: the capacity gate (bots and face sessions: admitted while
 * their frames are on time) and the REST guard (the API sheds its own load before any frame is
 * late). Measuring is separate from judging so that both judge the same window, and so that tests
 * can drive a meter with the readings they need instead of loading the machine.
 *
 * The event-loop lag is sampled by a timer every `lagSampleMs`: each firing records how much later
 * than its period it ran (what `monitorEventLoopDelay` measures, minus the period), kept in
 * histograms per window so that the p99 covers exactly the window the other figures do.
 */
import { createHistogram, performance, type EventLoopUtilization, type RecordableHistogram } from 'node:perf_hooks';

export const LOAD_WINDOW = {
  /** Length of a load window (ms); readings cover the last one to two windows. */
  windowMs: 2000,
  /** Period of the lag sampler (ms): the lag of a turn is how late this timer fires. */
  lagSampleMs: 10,
  /** A face frame emitted more than this many ms after its due time is late (the client jitter bound). */
  lateFrameMs: 10,
  /** The late share is judged only over at least this many frames (2 s of one session). */
  minFramesForLateShare: 50,
  /**
   * Frames reported while a session starts, and for this long after the last start ended (ms),
   * are not judged: a start-up (the room joined, the face opened, the encoder's first key frame)
   * makes its own and its neighbours' first frames late for a second or two, and a burst of
   * admitted visitors must not make the process judge itself overloaded by its own start-ups
   * (measured: 10-14 % late over the two windows after two bots started, 0 % after).
   */
  startupSettleMs: 3000,
  /**
   * The CPU share is measured over at least this span (ms); a reading over less (a meter younger
   * than this) reports 0, not judged. Over a few ms the measure is noise: the kernel adds another
   * running thread's CPU time at its ticks and switches, and a bot host reports its CPU in steps
   * (`loadReportMs`), so a short span could read several times the machine (seen: 1.02-1.13 of a
   * 2-core machine in a runner's first heartbeat).
   */
  minCpuSpanMs: 500,
} as const;

export interface LoadReading {
  readonly eventLoopUtilization: number;
  /** CPU time over the span as a share of all cores, 0..1 (0 over a span under `minCpuSpanMs`). */
  readonly cpuShare: number;
  /** p99 of the event-loop lag (ms) over the window. */
  readonly eventLoopLagMs: number;
  /** Share of the face frames over the window that left late (0 with too few frames to judge). */
  readonly lateFrameShare: number;
  /** Face frames reported over the window. */
  readonly frames: number;
  /** REST requests per second over the window. */
  readonly requestRate: number;
}

export interface LoadMeterOptions {
  readonly windowMs?: number;
  /** Cores the CPU share is measured against. */
  readonly cores: number;
  /** How long frames stay unjudged after a start-up ended (default LOAD_WINDOW.startupSettleMs). */
  readonly startupSettleMs?: number;
  /** The CPU time of the measured work so far (default `process.cpuUsage()`). */
  readonly cpuUsage?: () => NodeJS.CpuUsage;
}

interface Window {
  readonly at: number;
  readonly elu: EventLoopUtilization;
  readonly cpu: NodeJS.CpuUsage;
  /** Event-loop lag samples (microseconds) taken since this window began. */
  readonly lag: RecordableHistogram;
  frames: number;
  lateFrames: number;
  requests: number;
}

/** A lag in ms as the whole microseconds a RecordableHistogram takes (at least 1). */
const toMicros = (ms: number): number => Math.max(1, Math.round(ms * 1000));

/**
 * A lag histogram over 1 µs .. 60 s at three significant figures. Node's default range (up to
 * 2^53) makes each histogram about 360 KB of counts: creating one took 0.4-1.8 ms and a reading
 * made two, inside the admission transaction of every connect (a burst's decisions queued behind
 * them, issue 25). A lag past the range is not recorded; 60 s is no event loop that still answers.
 */
const lagHistogram = (): RecordableHistogram => createHistogram({ lowest: 1, highest: 60_000_000, figures: 3 });

export class LoadMeter {
  private older: Window;
  private newer: Window;
  private readonly lagTimer: NodeJS.Timeout;
  private readonly rollTimer: NodeJS.Timeout;
  private lastTick = performance.now();
  /** Start-ups in progress, and when the last one ended plus the settle time. */
  private startups = 0;
  private settledAt = 0;
  private readonly windowMs: number;
  private readonly cpuUsage: () => NodeJS.CpuUsage;
  /** The two windows' lag merged for a reading: one histogram reused, not one made per reading. */
  private readonly merged = lagHistogram();

  constructor(private readonly options: LoadMeterOptions) {
    this.windowMs = options.windowMs ?? LOAD_WINDOW.windowMs;
    this.cpuUsage = options.cpuUsage ?? (() => process.cpuUsage());
    this.older = this.newer = this.open();
    const period = LOAD_WINDOW.lagSampleMs;
    this.lagTimer = setInterval(() => {
      const now = performance.now();
      this.current().lag.record(toMicros(now - this.lastTick - period));
      this.lastTick = now;
    }, period);
    this.lagTimer.unref();
    // Rolls a quiet process's windows too, so that a reading never reaches further back than two.
    this.rollTimer = setInterval(() => this.current(), this.windowMs);
    this.rollTimer.unref();
  }

  private open(): Window {
    return { at: performance.now(), elu: performance.eventLoopUtilization(), cpu: this.cpuUsage(), lag: lagHistogram(), frames: 0, lateFrames: 0, requests: 0 };
  }

  /** The window being filled; a new one once the current one is a window old. */
  private current(): Window {
    if (performance.now() - this.newer.at >= this.windowMs) {
      this.older = this.newer;
      this.newer = this.open();
    }
    return this.newer;
  }

  /**
   * A session starts: until the returned function is called, and `startupSettleMs` after, face
   * frames are not judged. The function is idempotent.
   */
  startup(): () => void {
    this.startups++;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.startups--;
      this.settledAt = Math.max(this.settledAt, performance.now() + (this.options.startupSettleMs ?? LOAD_WINDOW.startupSettleMs));
    };
  }

  /** Whether a start-up is in progress or settling (frames are not judged now). */
  get startingUp(): boolean {
    return this.startups > 0 || performance.now() < this.settledAt;
  }

  /** One face frame emitted `lateMs` after its due time (not judged while a session starts up). */
  frame(lateMs: number): void {
    if (!Number.isFinite(lateMs) || this.startingUp) return;
    const w = this.current();
    w.frames++;
    if (lateMs > LOAD_WINDOW.lateFrameMs) w.lateFrames++;
  }

  /** One REST request served (or refused). */
  request(): void {
    this.current().requests++;
  }

  read(): LoadReading {
    const newest = this.current();
    const base = this.older;
    const now = { at: performance.now(), elu: performance.eventLoopUtilization(), cpu: this.cpuUsage() };
    const elapsedMs = Math.max(1, now.at - base.at);
    const cpuMs = (now.cpu.user - base.cpu.user + now.cpu.system - base.cpu.system) / 1000;
    const windows = newest === base ? [base] : [base, newest];
    const lag = this.merged;
    lag.reset();
    let frames = 0;
    let lateFrames = 0;
    let requests = 0;
    for (const w of windows) {
      lag.add(w.lag);
      frames += w.frames;
      lateFrames += w.lateFrames;
      requests += w.requests;
    }
    return {
      eventLoopUtilization: performance.eventLoopUtilization(now.elu, base.elu).utilization,
      // At most the whole machine: a span's CPU time may include time from just before it (the
      // accounting steps above), never more cores than there are.
      cpuShare: elapsedMs < LOAD_WINDOW.minCpuSpanMs ? 0 : Math.min(1, Math.max(0, cpuMs / (elapsedMs * this.options.cores))),
      eventLoopLagMs: lag.count ? lag.percentile(99) / 1000 : 0,
      lateFrameShare: frames >= LOAD_WINDOW.minFramesForLateShare ? lateFrames / frames : 0,
      frames,
      requestRate: (requests * 1000) / elapsedMs,
    };
  }

  close(): void {
    clearInterval(this.lagTimer);
    clearInterval(this.rollTimer);
  }
}
