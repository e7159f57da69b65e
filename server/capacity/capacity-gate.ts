/**
 * Admission by capacity: one gate per process that every CPU-heavy long-lived thing (a /realtime
 * face session, a Session API bot) must pass before it starts. It judges by what those sessions
 * need, and by nothing else (issue 25, "live conversations first"):
 *
 * - slots: the number of face sessions this machine sustains, from the measured cost of one
 *   session (FACE_CAPACITY.coresPerSession: about a quarter of a core for a live 640x360 bot,
 *   docs/sessions.md "Capacity") after a reserve for the API itself; `SVC_MAX_FACE_SESSIONS`
 *   overrides it for other hardware (`npm run bench -- sessions` measures it);
 * - the lateness of the live sessions' face frames: while more than `maxLateFrameShare` of the
 *   frames in the load window left more than 10 ms late, nothing new is admitted even below the
 *   limit, so the sessions already running keep their frame rate.
 *
 * The API's own request load (event-loop lag, utilization, CPU share) is measured by the same
 * LoadMeter but never refuses a visitor: the REST guard (rest-guard.ts) sheds requests first.
 * `snapshot().lastRefusal` and the metrics say which of the two refused (`full` or `late_frames`).
 *
 * ```ts
 * const lease = gate.tryAcquire();        // weight 1 = one face session
 * if (!lease) return refuse('server_busy');
 * ...
 * lease.release();                         // idempotent
 * gate.snapshot();                         // { limit, inUse, available, lateFrames, ... } for metrics
 * ```
 */
import { availableParallelism } from 'node:os';
import { LoadMeter, type LoadReading } from './load-meter.ts';

export const FACE_CAPACITY = {
  /**
   * Cores one live face session costs (a 640x360 bot: VP8 encode, render, loop, Opus): 0.23-0.27
   * measured per session on the 2-core reference machine (docs/sessions.md, "Capacity, second round").
   */
  coresPerSession: 0.25,
  /** Cores kept for the API, the database driver and the runtime before sessions are counted. */
  apiReserveCores: 0.5,
  /**
   * Refuse new work while more than this share of the face frames emitted over the load window
   * left more than LOAD_WINDOW.lateFrameMs after their due time. The frames are what the sessions
   * are for; a held count runs 0-2 % late, a saturated one 15-90 % (measured: 6 bots on 2 cores
   * shared with their visitors, 64 %).
   */
  maxLateFrameShare: 0.05,
} as const;

/** Default slots for a machine with `cores` cores: (cores - API reserve) / cost of one session. */
export function defaultFaceSessionLimit(cores: number = availableParallelism()): number {
  return Math.max(1, Math.floor((cores - FACE_CAPACITY.apiReserveCores) / FACE_CAPACITY.coresPerSession + 1e-9));
}

export interface LoadCheckOptions {
  /** Share of face frames late by more than LOAD_WINDOW.lateFrameMs beyond which new work is refused. */
  readonly maxLateFrameShare?: number;
}

export interface CapacityGateOptions {
  /** Total weight admitted at once (default `defaultFaceSessionLimit()`). */
  readonly limit?: number;
  /** The late-frame check; `false` admits by count only (default: on, with FACE_CAPACITY's bound). */
  readonly loadCheck?: boolean | LoadCheckOptions;
  /** The process's load meter (shared with the REST guard); one of the gate's own by default. */
  readonly meter?: LoadMeter;
}

export interface Lease {
  readonly weight: number;
  readonly released: boolean;
  /** Gives the capacity back; calling it again does nothing. */
  release(): void;
}

export type RefusalReason = 'full' | 'late_frames';

export interface CapacitySnapshot {
  readonly limit: number;
  /** Sum of the weights of unreleased leases. */
  readonly inUse: number;
  readonly leases: number;
  readonly available: number;
  /** True while the live sessions' frames are late past the bound (the gate refuses new work). */
  readonly lateFrames: boolean;
  /** The load window as measured (utilization, CPU share and lag are reported, never refused on). */
  readonly load: LoadReading;
  readonly admitted: number;
  readonly refused: { readonly full: number; readonly late_frames: number };
  readonly lastRefusal?: RefusalReason;
}

export interface CapacityGate {
  readonly limit: number;
  /** Weight of the leases held now (cheap: no load reading). */
  readonly inUse: number;
  /** A lease of `weight` (default 1), or null when it does not fit or the live sessions' frames are late. */
  tryAcquire(weight?: number): Lease | null;
  /** Why `tryAcquire(weight)` would refuse now, or null; takes and counts nothing. */
  wouldRefuse(weight?: number): RefusalReason | null;
  /** Counts a refusal decided from `wouldRefuse` (its caller refused someone for this reason). */
  recordRefusal(reason: RefusalReason): void;
  snapshot(): CapacitySnapshot;
  /** Reports one face frame emitted `lateMs` after its due time (feeds the late-frame check; cheap). */
  recordFrameLateness(lateMs: number): void;
  /** A session starts up: its frames and its neighbours' are not judged until the returned function is called and the start-up has settled (LoadMeter.startup). */
  startingUp(): () => void;
  /** The load meter the gate judges from (the REST guard reads the same one). */
  readonly meter: LoadMeter;
  /** Stops the load sampler's timer (leases stay valid). */
  close(): void;
}

export class CapacityConfigError extends Error {
  readonly code = 'invalid_capacity';
}

function positiveNumber(value: number, what: string): number {
  if (!(typeof value === 'number' && Number.isFinite(value) && value > 0)) throw new CapacityConfigError(`${what} must be a positive number, got ${String(value)}`);
  return value;
}

export function createCapacityGate(options: CapacityGateOptions = {}): CapacityGate {
  const limit = positiveNumber(options.limit ?? defaultFaceSessionLimit(), 'the capacity limit');
  const check = options.loadCheck === false ? undefined : options.loadCheck === true || options.loadCheck === undefined ? {} : options.loadCheck;
  const maxLate = positiveNumber(check?.maxLateFrameShare ?? FACE_CAPACITY.maxLateFrameShare, 'maxLateFrameShare');
  const ownMeter = options.meter ? undefined : new LoadMeter({ cores: availableParallelism() });
  const meter = options.meter ?? ownMeter!;
  let inUse = 0;
  let leases = 0;
  let admitted = 0;
  const refused = { full: 0, late_frames: 0 };
  let lastRefusal: RefusalReason | undefined;
  const late = (reading: LoadReading) => check !== undefined && reading.lateFrameShare > maxLate;
  const recordRefusal = (reason: RefusalReason) => {
    refused[reason]++;
    lastRefusal = reason;
  };
  const wouldRefuse = (weight = 1): RefusalReason | null => {
    positiveNumber(weight, 'a lease weight');
    if (inUse + weight > limit) return 'full';
    // An idle gate admits: with nothing running there is nothing to starve (and no frame to be late).
    if (inUse > 0 && late(meter.read())) return 'late_frames';
    return null;
  };

  return {
    limit,
    meter,
    get inUse() {
      return inUse;
    },
    wouldRefuse,
    recordRefusal,
    tryAcquire(weight = 1) {
      const refusal = wouldRefuse(weight);
      if (refusal) {
        recordRefusal(refusal);
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
      const load = meter.read();
      return {
        limit,
        inUse,
        leases,
        available: Math.max(0, limit - inUse),
        lateFrames: inUse > 0 && late(load),
        load,
        admitted,
        refused: { ...refused },
        ...(lastRefusal ? { lastRefusal } : {}),
      };
    },
    recordFrameLateness(lateMs) {
      meter.frame(lateMs);
    },
    startingUp: () => meter.startup(),
    close() {
      ownMeter?.close();
    },
  };
}
