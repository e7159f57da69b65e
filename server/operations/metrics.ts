/**
 * Prometheus metrics (`GET /metrics`, prom-client): every series is documented in
 * docs/operations.md. Per server: HTTP request durations by route pattern and status, the
 * Session API's live sessions, admissions, refusals and endings, /realtime face sessions and
 * refusals, face frames' lateness (jitter), the capacity gate, the generation job queue's depth
 * and this process's job failures. Per process (registered once, shared by every server in the
 * process): prom-client's default `process_*` and `nodejs_*` series, event-loop lag among them.
 *
 * Counts kept by the modules themselves (`LiveSessions.stats()`, `RealtimeEndpoint.refusals()`,
 * `CapacityGate.snapshot()`, `GenerationJobs.failures()`) are read at scrape time, and the job
 * queue's depth is one query at scrape time: measuring costs nothing between scrapes. The one
 * per-event cost is a face frame's lateness: one histogram observation per frame.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry, type Metric } from 'prom-client';
import type { CapacityGate } from '../capacity/capacity-gate.ts';
import type { RestGuard } from '../capacity/rest-guard.ts';
import { JOB_FAILURE_REASONS, type JobFailureCounts } from '../jobs/job-worker.ts';
import type { LiveSessionStats } from '../sessions/live-sessions.ts';

/** Who may read `/metrics` (`SVC_METRICS`, `SVC_METRICS_TOKEN`); see metricsAccessFromEnv. */
export type { MetricsAccess } from '../config/server-config.ts';

export const METRICS = {
  /** Shortest accepted SVC_METRICS_TOKEN. */
  /** Request duration buckets (seconds). */
  httpBuckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  /** Session API refusal codes always present (0 until seen). */
  sessionRefusals: ['agent_not_found', 'agent_unpublished', 'auth_failed', 'server_busy', 'concurrency_limit', 'room_creation_failed', 'orchestrator_error', 'internal_error'],
  /** /realtime refusal codes always present (0 until seen). */
  faceRefusals: ['auth_failed', 'unknown_config', 'server_busy', 'invalid_configuration', 'internal_error'],
  /**
   * Face frame lateness buckets (seconds): 1 ms .. 1 s. A frame is due every 40 ms; 40 ms late is
   * a whole frame (the client sees a stutter), 5 ms is the arrival-gap target (docs/face-models.md).
   */
  frameLatenessBuckets: [0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 1],
  admissionDecisionBuckets: [0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.2, 0.5, 1, 5],
  /** Job statuses whose count is the queue's depth. */
  jobQueueStatuses: ['queued', 'running'],
  /** A scrape waits this long for the job queue's count; past it the depth series are left out. */
  jobQueueTimeoutMs: 1000,
} as const;

/** Where a face session's frames go: a `/realtime` client, or a Session API bot's room. */
export type FaceFrameConsumer = 'realtime' | 'bot';

/**
 * How late face frames are emitted against their due time (`FaceSession.startedAtMs + ptsMs`):
 * their jitter. Created before the endpoints (they record into it), registered by
 * `createServerMetrics` (`frameTiming` source). Recording is one histogram observation per frame.
 */
export interface FaceFrameTiming {
  /** Records one frame of a `/realtime` session emitted `lateMs` after its due time. */
  readonly realtime: (lateMs: number) => void;
  /** Records one frame of a bot's face session emitted `lateMs` after its due time. */
  readonly bot: (lateMs: number) => void;
  readonly histogram: Histogram<'source'>;
}

export function createFaceFrameTiming(): FaceFrameTiming {
  const histogram = new Histogram({
    name: 'svc_face_frame_lateness_seconds',
    help: 'Face frames: how late each was emitted against its due time (session start + index x 40 ms), by where it goes (realtime, bot).',
    labelNames: ['source'],
    buckets: [...METRICS.frameLatenessBuckets],
    registers: [],
  });
  const recorder = (source: FaceFrameConsumer) => {
    const child = histogram.labels({ source });
    // Early by a fraction of a millisecond (a timer's rounding) is on time.
    return (lateMs: number) => child.observe(lateMs > 0 ? lateMs / 1000 : 0);
  };
  return { realtime: recorder('realtime'), bot: recorder('bot'), histogram };
}

/** How long admission took to decide, per connect (LiveSessionsOptions.onDecision). */
export interface AdmissionTiming {
  readonly histogram: Histogram;
  record(ms: number, outcome: 'admitted' | 'refused'): void;
}

export function createAdmissionTiming(): AdmissionTiming {
  const histogram = new Histogram({
    name: 'svc_session_admission_decision_seconds',
    help: 'Session API connects: from the request to the admission decision (admitted, or refused by any rule), by outcome.',
    labelNames: ['outcome'],
    buckets: [...METRICS.admissionDecisionBuckets],
    registers: [],
  });
  return { histogram, record: (ms, outcome) => histogram.labels({ outcome }).observe(ms / 1000) };
}

/** The generation job queue, read at scrape time. */
export interface JobMetricsSource {
  /** Jobs by status across every worker (the shared queue): `queued` and `running`. */
  depth(): Promise<Readonly<Record<string, number>>>;
  /** This process's worker's failed attempts, by reason class and outcome. */
  failures(): JobFailureCounts;
}

/** What the metrics read at scrape time; each is optional (a server without sessions has none). */
export interface MetricsSources {
  /** The route pattern serving a request (the server's route table): requests are labelled with it. */
  readonly routeOf?: (path: string, method: string) => string | undefined;
  readonly sessions?: () => LiveSessionStats;
  readonly realtime?: () => { readonly live: number; readonly refusals: Readonly<Record<string, number>> };
  readonly capacity?: Pick<CapacityGate, 'snapshot'>;
  /** The REST guard: rate-limited and shed requests. */
  readonly restGuard?: Pick<RestGuard, 'stats'>;
  /** Face frame lateness recorded by /realtime and the bots (create it with createFaceFrameTiming). */
  readonly frameTiming?: FaceFrameTiming;
  /** Admission decision times (create it with createAdmissionTiming). */
  readonly admissionTiming?: AdmissionTiming;
  readonly jobs?: JobMetricsSource;
  /** Series kept by another module (the avatar sessions' join, first-frame and A/V offset figures), registered as they are. */
  readonly extra?: readonly Metric[];
}

export interface ServerMetrics {
  readonly registry: Registry;
  /** Times one HTTP request (call when it arrives); recorded when its response closes. */
  observe(req: IncomingMessage, res: ServerResponse): void;
  /** The exposition text (this server's series, then the process's). */
  scrape(): Promise<string>;
  readonly contentType: string;
}

let processRegistry: Registry | undefined;

/** prom-client's default series (CPU, memory, GC, handles, event-loop lag), once per process. */
function processMetrics(): Registry {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectDefaultMetrics({ register: processRegistry, eventLoopMonitoringPrecision: 10 });
  }
  return processRegistry;
}

const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);

/** A bounded label for a request: the path pattern of the route serving it, or `unmatched`. */
export function routeLabel(routeOf: MetricsSources['routeOf'], method: string, url: string | undefined): string {
  const q = (url ?? '/').indexOf('?');
  const path = q === -1 ? (url ?? '/') : (url ?? '/').slice(0, q);
  return routeOf?.(path, method) ?? 'unmatched';
}

/** Sets a labelled counter from counts kept elsewhere (the `always` labels appear with 0). */
function setCounts(counter: Counter<string>, label: string, counts: Readonly<Record<string, number>>, always: readonly string[]): void {
  counter.reset();
  for (const key of always) counter.inc({ [label]: key }, 0);
  for (const [key, value] of Object.entries(counts)) counter.inc({ [label]: key }, value);
}

export function createServerMetrics(sources: MetricsSources): ServerMetrics {
  const registry = new Registry();
  const registers = [registry];
  const http = new Histogram({
    name: 'svc_http_request_duration_seconds',
    help: 'HTTP requests: time from the request to the end of its response, by method, route pattern and status (499: the client hung up).',
    labelNames: ['method', 'route', 'status'],
    buckets: [...METRICS.httpBuckets],
    registers,
  });

  if (sources.sessions) {
    const read = sources.sessions;
    new Gauge({ name: 'svc_sessions_live', help: 'Session API sessions (bots) this process runs now.', registers, collect() { this.set(read().live); } });
    new Counter({ name: 'svc_sessions_started_total', help: 'Connect requests that got a session.', registers, collect() { this.reset(); this.inc(read().started); } });
    new Counter({ name: 'svc_session_admissions_refused_total', help: 'Connect requests answered with an error, by error_code.', labelNames: ['reason'], registers, collect() { setCounts(this, 'reason', read().refused, METRICS.sessionRefusals); } });
    new Counter({ name: 'svc_sessions_ended_total', help: "This process's sessions that ended, by termination_reason.", labelNames: ['reason'], registers, collect() { setCounts(this, 'reason', read().ended, ['server_shutdown']); } });
  }

  if (sources.realtime) {
    const read = sources.realtime;
    new Gauge({ name: 'svc_face_sessions_live', help: '/realtime face sessions open now.', registers, collect() { this.set(read().live); } });
    new Counter({ name: 'svc_face_sessions_refused_total', help: '/realtime connections closed with a fatal error before session_ready, by error code.', labelNames: ['code'], registers, collect() { setCounts(this, 'code', read().refusals, METRICS.faceRefusals); } });
  }

  if (sources.capacity) {
    const gate = sources.capacity;
    new Gauge({ name: 'svc_capacity_in_use', help: 'Capacity gate: weight of the leases held (face sessions and bots).', registers, collect() { this.set(gate.snapshot().inUse); } });
    new Gauge({ name: 'svc_capacity_limit', help: 'Capacity gate: the slots (SVC_MAX_FACE_SESSIONS, default (cores - 0.5) / 0.25).', registers, collect() { this.set(gate.snapshot().limit); } });
    new Gauge({ name: 'svc_capacity_overloaded', help: "Capacity gate: 1 while the live sessions' frames are late past the bound (new work refused: late_frames).", registers, collect() { this.set(gate.snapshot().lateFrames ? 1 : 0); } });
    new Gauge({ name: 'svc_capacity_event_loop_utilization', help: 'Load meter: event-loop utilization over the load window (0..1; reported, never refuses a visitor).', registers, collect() { this.set(gate.snapshot().load.eventLoopUtilization); } });
    new Gauge({ name: 'svc_capacity_event_loop_lag_seconds', help: 'Load meter: p99 event-loop lag over the load window (the REST API sheds load past SVC_REST_SHED_LAG_MS, default 5 ms, under a REST flood).', registers, collect() { this.set(gate.snapshot().load.eventLoopLagMs / 1000); } });
    new Gauge({ name: 'svc_capacity_late_frame_share', help: 'Capacity gate: share of face frames over its load window emitted more than 10 ms after their due time (refuses above 0.05).', registers, collect() { this.set(gate.snapshot().load.lateFrameShare); } });
    new Counter({ name: 'svc_capacity_refusals_total', help: "Capacity gate: leases refused, by reason (full: every slot taken; late_frames: the live sessions' frames are late).", labelNames: ['reason'], registers, collect() { setCounts(this, 'reason', gate.snapshot().refused, ['full', 'late_frames']); } });
  }

  if (sources.restGuard) {
    const guard = sources.restGuard;
    new Counter({ name: 'svc_rest_rate_limited_total', help: 'REST requests refused 429 rate_limited (per-API-key token bucket).', registers, collect() { this.reset(); this.inc(guard.stats().rateLimited); } });
    new Counter({ name: 'svc_rest_shed_total', help: 'REST requests shed 503 server_busy to keep live sessions on time.', registers, collect() { this.reset(); this.inc(guard.stats().shed); } });
    new Counter({ name: 'svc_rest_held_total', help: 'REST refusals (429/503) answered only after the hold: a client that went on after its refusals.', registers, collect() { this.reset(); this.inc(guard.stats().held); } });
    new Counter({ name: 'svc_rest_paced_total', help: 'Accepted REST requests of a client that went on after its refusals, held for their paced turn.', registers, collect() { this.reset(); this.inc(guard.stats().paced); } });
    new Gauge({ name: 'svc_rest_shedding', help: 'REST guard: 1 while the REST API sheds load (as of its last request).', registers, collect() { this.set(guard.stats().shedding ? 1 : 0); } });
  }

  if (sources.frameTiming) registry.registerMetric(sources.frameTiming.histogram);
  if (sources.admissionTiming) registry.registerMetric(sources.admissionTiming.histogram);
  for (const metric of sources.extra ?? []) registry.registerMetric(metric);

  if (sources.jobs) {
    const jobs = sources.jobs;
    new Gauge({
      name: 'svc_jobs_queue_depth',
      help: 'Generation jobs in the shared queue (every worker), by status: queued (waiting, including retries in backoff) and running.',
      labelNames: ['status'],
      registers,
      async collect() {
        this.reset();
        let timer: ReturnType<typeof setTimeout> | undefined;
        const timeout = new Promise<undefined>((resolve) => {
          timer = setTimeout(() => resolve(undefined), METRICS.jobQueueTimeoutMs);
        });
        // The database unreachable or slow: the series are left out of this scrape (no stale value).
        const depth = await Promise.race([jobs.depth().catch(() => undefined), timeout]).finally(() => clearTimeout(timer));
        if (!depth) return;
        for (const status of METRICS.jobQueueStatuses) this.set({ status }, depth[status] ?? 0);
      },
    });
    new Counter({
      name: 'svc_job_failures_total',
      help: "Failed attempts of generation jobs run by this process's worker, by reason class and outcome (retrying: queued again; failed: it was the last attempt).",
      labelNames: ['reason', 'outcome'],
      registers,
      collect() {
        this.reset();
        const counts = jobs.failures();
        for (const reason of JOB_FAILURE_REASONS) {
          for (const outcome of ['retrying', 'failed'] as const) this.inc({ reason, outcome }, counts[reason]?.[outcome] ?? 0);
        }
      },
    });
  }

  const defaults = processMetrics();
  return {
    registry,
    contentType: registry.contentType,
    observe(req, res) {
      const started = performance.now();
      res.once('close', () => {
        const method = METHODS.has(req.method ?? '') ? req.method! : 'OTHER';
        const status = res.writableFinished ? String(res.statusCode) : '499';
        http.observe({ method, route: routeLabel(sources.routeOf, method, req.url), status }, (performance.now() - started) / 1000);
      });
    },
    async scrape() {
      return (await registry.metrics()) + '\n' + (await defaults.metrics());
    },
  };
}
