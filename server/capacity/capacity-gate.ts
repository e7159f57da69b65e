/**
 * Admission by capacity: one gate per process that every CPU-heavy long-lived thing (a /realtime
 * face session, a Session API bot) must pass before it starts. Two checks:
 *
 * - a count limit (`limit`, weighted leases): the number of 25 fps face sessions this machine
 *   sustains. Default `cores * 2` (FACE_CAPACITY.sessionsPerCore): measured on the 2-core
 *   reference machine, 4 sessions of the default face at the default size hold 25 fps, while 32
 *   ran at 2.7 fps each and pushed the REST median to 492 ms (issue 17). Operators set
 *   `SVC_MAX_FACE_SESSIONS` after measuring their own hardware (`npm run bench -- capacity`).
 * - a load check: while the process is overloaded (its event loop busy more than
 *   `maxEventLoopUtilization` of the last window, its event-loop lag at p99 above
 *   `maxEventLoopLagMs`, its CPU time above `maxCpuShare` of every core, or more than
 *   `maxLateFrameShare` of its live sessions' face frames leaving over `lateFrameMs` after their
 *   due time), nothing new is admitted even below the limit: the sessions already running keep
 *   their frame rate instead of all of them slowing down (docs/operations.md, "Overload").
 *
 * Usage (the API other modules rely on):
 *
 * ```ts
 * const lease = gate.tryAcquire();        // weight 1 = one face session
 * if (!lease) return refuse('server_busy');
 * ...
 * lease.release();                         // idempotent
 * gate.snapshot();                         // { limit, inUse, available, overloaded, ... } for metrics
 * ```
 */
import { availableParallelism } from 'node:os';
import { createHistogram, performance, type EventLoopUtilization, type RecordableHistogram } from 'node:perf_hooks';

export const FACE_CAPACITY = {
  /** Face sessions per core at 25 fps (measured: 4 on 2 cores; see the header). */
  sessionsPerCore: 2,
  /** Refuse new work while the event loop was busy more than this share of the last window. */
  maxEventLoopUtilization: 0.9,
  /** Refuse new work while the process used more than this share of all cores' time. */
  maxCpuShare: 0.9,
  /**
   * Refuse new work while the event loop's lag (p99 over the load window) exceeds this many ms
   * (`SVC_CAPACITY_MAX_EVENT_LOOP_LAG_MS`). 40 ms is one face frame: a frame is rendered 32 ms
   * before it is due and emitted by a timer, so a loop that is late by more than a frame for over
   * 1 % of its turns emits frames late, and another session would make every one of them later.
   * A single stall (a bot starting, a full GC) is one sample of the hundreds a window holds and
   * does not refuse anything; repeated stalls do.
   */
  maxEventLoopLagMs: 40,
  /**
   * Refuse new work while more than this share of the face frames emitted over the load window
   * (`/realtime` sessions and bots, reported with `recordFrameLateness`) left more than
   * `lateFrameMs` after their due time. The frames are what the sessions are for: the process's
   * own loop and CPU share can look fine while its render worker or the machine's cores are
   * saturated (measured: 6 bots on 2 cores shared with their visitors, 64 % of frames > 5 ms late,
   * loop lag and process CPU under their bounds). 5 %: a held count runs 0-2 %.
   */
  maxLateFrameShare: 0.05,
  /** A frame emitted more than this many ms after its due time counts as late (10 ms: the client jitter bound). */
  lateFrameMs: 10,
  /** The late share is judged only over at least this many frames (2 s of one session). */
  minFramesForLateShare: 50,
  /** Period of the lag sampler (ms): the lag of a turn is how late this timer fires. */
  lagSampleMs: 10,
  /** Length of the load window (ms); the load is measured over the last 1 to 2 windows. */
  loadWindowMs: 2000,
} as const;

/** Default limit of face sessions for a machine with `cores` cores. */
export function defaultFaceSessionLimit(cores: number = availableParallelism()): number {
  return Math.max(1, Math.floor(cores * FACE_CAPACITY.sessionsPerCore));
}

export interface LoadCheckOptions {
  readonly maxEventLoopUtilization?: number;
  readonly maxCpuShare?: number;
  /** p99 event-loop lag (ms) over the load window beyond which new work is refused. */
  readonly maxEventLoopLagMs?: number;
  /** Share of face frames late by more than FACE_CAPACITY.lateFrameMs beyond which new work is refused. */
  readonly maxLateFrameShare?: number;
  readonly windowMs?: number;
  /** Cores the CPU share is measured against (default: os.availableParallelism()). */
  readonly cores?: number;
}

export interface CapacityGateOptions {
  /** Total weight admitted at once (default `defaultFaceSessionLimit()`). */
  readonly limit?: number;
  /** The load check; `false` admits by count only (default: on, with FACE_CAPACITY's values). */
  readonly loadCheck?: boolean | LoadCheckOptions;
  /**
   * The CPU time the gated work has used so far (default `process.cpuUsage()`): a server whose
   * bots run in a process of their own (server/sessions/bot-host.ts) adds that process's.
   */
  readonly cpuUsage?: () => NodeJS.CpuUsage;
}

export interface Lease {
  readonly weight: number;
  readonly released: boolean;
  /** Gives the capacity back; calling it again does nothing. */
  release(): void;
}

export type RefusalReason = 'full' | 'overloaded';

export interface CapacitySnapshot {
  readonly limit: number;
  /** Sum of the weights of unreleased leases. */
  readonly inUse: number;
  readonly leases: number;
  readonly available: number;
  readonly overloaded: boolean;
  /** Over the current load window; undefined when the load check is off. */
  readonly eventLoopUtilization?: number;
  readonly cpuShare?: number;
  /** p99 of the event-loop lag (ms) over the current load window: how late the loop's timer turns ran. */
  readonly eventLoopLagMs?: number;
  /** Share of the face frames reported over the load window that were late (0 with too few frames to judge). */
  readonly lateFrameShare?: number;
  readonly admitted: number;
  readonly refused: { readonly full: number; readonly overloaded: number };
  readonly lastRefusal?: RefusalReason;
}

export interface CapacityGate {
  readonly limit: number;
  /** A lease of `weight` (default 1), or null when it does not fit or the process is overloaded. */
  tryAcquire(weight?: number): Lease | null;
  snapshot(): CapacitySnapshot;
  /** Reports one face frame emitted `lateMs` after its due time (feeds the late-frame check; cheap). */
  recordFrameLateness(lateMs: number): void;
  /** Stops the load sampler's timer (leases stay valid). */
  close(): void;
}

export class CapacityConfigError extends Error {
  readonly code = 'invalid_capacity';
}

interface LoadSample {
  readonly at: number;
  readonly elu: EventLoopUtilization;
  readonly cpu: NodeJS.CpuUsage;
  /** Event-loop lag samples (microseconds) taken since this sample. */
  readonly lag: RecordableHistogram;
  /** Face frames reported since this sample, and how many of them were late. */
  frames: number;
  lateFrames: number;
}

const sample = (cpuUsage: () => NodeJS.CpuUsage): LoadSample => ({ at: performance.now(), elu: performance.eventLoopUtilization(), cpu: cpuUsage(), lag: createHistogram(), frames: 0, lateFrames: 0 });

export interface LoadReading {
  readonly eventLoopUtilization: number;
  readonly cpuShare: number;
  readonly eventLoopLagMs: number;
  readonly lateFrameShare: number;
}

/**
 * Measures the process's load over a sliding window of one to two `windowMs`. The event-loop lag
 * is sampled by a timer every FACE_CAPACITY.lagSampleMs: each firing records how much later than
 * its period it ran (what `monitorEventLoopDelay` measures, minus the period; kept here in
 * histograms per window so that the p99 covers exactly the window the other figures do).
 */
class LoadMeter {
  private older: LoadSample;
  private newer: LoadSample;
  private readonly timer: NodeJS.Timeout;
  private readonly lagTimer: NodeJS.Timeout;
  private lastTick = performance.now();

  constructor(
    private readonly windowMs: number,
    private readonly cores: number,
    private readonly cpuUsage: () => NodeJS.CpuUsage,
  ) {
    this.older = this.newer = sample(cpuUsage);
    this.timer = setInterval(() => this.roll(), windowMs);
    this.timer.unref();
    const period = FACE_CAPACITY.lagSampleMs;
    this.lagTimer = setInterval(() => {
      const now = performance.now();
      this.newer.lag.record(toMicros(now - this.lastTick - period));
      this.lastTick = now;
    }, period);
    this.lagTimer.unref();
  }

  frame(lateMs: number): void {
    this.newer.frames++;
    if (lateMs > FACE_CAPACITY.lateFrameMs) this.newer.lateFrames++;
  }

  private roll(): void {
    this.older = this.newer;
    this.newer = sample(this.cpuUsage);
  }

  measure(): LoadReading {
    const now = sample(this.cpuUsage);
    // The timer may have been held up by the very load we measure: roll here too.
    if (now.at - this.newer.at >= this.windowMs) {
      this.older = this.newer;
      this.newer = now;
    }
    const base = this.older;
    const elapsedMs = Math.max(1, now.at - base.at);
    const cpuMs = (now.cpu.user - base.cpu.user + now.cpu.system - base.cpu.system) / 1000;
    // What was recorded since `base`: its window, and the current one when it is another.
    const windows = this.newer === base ? [base] : [base, this.newer];
    const lag = createHistogram();
    let frames = 0;
    let lateFrames = 0;
    for (const w of windows) {
      lag.add(w.lag);
      frames += w.frames;
      lateFrames += w.lateFrames;
    }
    return {
      eventLoopUtilization: performance.eventLoopUtilization(now.elu, base.elu).utilization,
      cpuShare: cpuMs / (elapsedMs * this.cores),
      eventLoopLagMs: lag.count ? lag.percentile(99) / 1000 : 0,
      lateFrameShare: frames >= FACE_CAPACITY.minFramesForLateShare ? lateFrames / frames : 0,
    };
  }

  close(): void {
    clearInterval(this.timer);
    clearInterval(this.lagTimer);
  }
}

/** A lag in ms as the whole microseconds a RecordableHistogram takes (at least 1). */
const toMicros = (ms: number): number => Math.max(1, Math.round(ms * 1000));

function positiveNumber(value: number, what: string): number {
  if (!(typeof value === 'number' && Number.isFinite(value) && value > 0)) throw new CapacityConfigError(`${what} must be a positive number, got ${String(value)}`);
  return value;
}

export function createCapacityGate(options: CapacityGateOptions = {}): CapacityGate {
  const limit = positiveNumber(options.limit ?? defaultFaceSessionLimit(), 'the capacity limit');
  const load = options.loadCheck === false ? undefined : options.loadCheck === true || options.loadCheck === undefined ? {} : options.loadCheck;
  const maxElu = positiveNumber(load?.maxEventLoopUtilization ?? FACE_CAPACITY.maxEventLoopUtilization, 'maxEventLoopUtilization');
  const maxCpu = positiveNumber(load?.maxCpuShare ?? FACE_CAPACITY.maxCpuShare, 'maxCpuShare');
  const maxLag = positiveNumber(load?.maxEventLoopLagMs ?? FACE_CAPACITY.maxEventLoopLagMs, 'maxEventLoopLagMs');
  const maxLate = positiveNumber(load?.maxLateFrameShare ?? FACE_CAPACITY.maxLateFrameShare, 'maxLateFrameShare');
  const meter = load ? new LoadMeter(positiveNumber(load.windowMs ?? FACE_CAPACITY.loadWindowMs, 'the load window'), load.cores ?? availableParallelism(), options.cpuUsage ?? (() => process.cpuUsage())) : undefined;
  let inUse = 0;
  let leases = 0;
  let admitted = 0;
  const refused = { full: 0, overloaded: 0 };
  let lastRefusal: RefusalReason | undefined;

  const overload = () => {
    if (!meter) return { overloaded: false };
    const m = meter.measure();
    return { overloaded: m.eventLoopUtilization > maxElu || m.cpuShare > maxCpu || m.eventLoopLagMs > maxLag || m.lateFrameShare > maxLate, ...m };
  };

  return {
    limit,
    tryAcquire(weight = 1) {
      positiveNumber(weight, 'a lease weight');
      if (inUse + weight > limit) {
        refused.full++;
        lastRefusal = 'full';
        return null;
      }
      // An idle gate admits regardless of load: with nothing running there is nothing to starve,
      // and a start-up or request burst must not refuse the first visitor.
      if (inUse > 0 && overload().overloaded) {
        refused.overloaded++;
        lastRefusal = 'overloaded';
        return null;
      }
      inUse += weight;
      leases++;
      admitted++;
      let released = false;
      return {
        weight,
        get released() {
          return released;
        },
        release() {
          if (released) return;
          released = true;
          inUse -= weight;
          leases--;
        },
      };
    },
    snapshot() {
      const o = overload();
      return {
        limit,
        inUse,
        leases,
        available: Math.max(0, limit - inUse),
        ...o,
        admitted,
        refused: { ...refused },
        ...(lastRefusal ? { lastRefusal } : {}),
      };
    },
    recordFrameLateness(lateMs) {
      if (Number.isFinite(lateMs)) meter?.frame(lateMs);
    },
    close() {
      meter?.close();
    },
  };
}
