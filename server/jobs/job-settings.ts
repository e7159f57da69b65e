import { availableParallelism } from 'node:os';

/**
 * How durable generation jobs run (docs/jobs.md). Every option is documented once, here, with the
 * reason for its default; `SVC_JOB_*` environment variables override them (`jobSettingsFromEnv`).
 */
export interface JobSettings {
  /**
   * Run a worker inside this process (`SVC_WORKER`, default on). Off: this process only queues
   * jobs and answers their status; `npm run worker` processes (PostgreSQL only) run them.
   */
  runWorker: boolean;
  /** Jobs one worker process runs at once (`SVC_JOB_CONCURRENCY`). */
  concurrency: number;
  /** Jobs of one organization running at once across every worker (`SVC_JOB_ORG_CONCURRENCY`). */
  organizationConcurrency: number;
  /**
   * Jobs one organization may have waiting (`queued`: due, or waiting for a retry) at once
   * (`SVC_JOB_MAX_QUEUED`); a generate request past it is 429 `too_many_jobs`.
   */
  maxQueuedPerOrganization: number;
  /** Attempts a job gets before it ends `failed` (`SVC_JOB_MAX_ATTEMPTS`); recorded on each job at creation. */
  maxAttempts: number;
  /** Delay before the 2nd attempt; doubles per attempt (`SVC_JOB_RETRY_BASE_MS`). */
  retryBaseMs: number;
  /** Longest delay between two attempts (`SVC_JOB_RETRY_MAX_MS`). */
  retryMaxMs: number;
  /** A running job is reclaimed once its worker has not renewed its lease for this long (`SVC_JOB_LEASE_MS`). */
  leaseMs: number;
  /** How often a worker renews the leases of its running jobs (`SVC_JOB_HEARTBEAT_MS`). */
  heartbeatMs: number;
  /** How often a worker looks for due jobs when nothing woke it, and for lapsed leases (`SVC_JOB_POLL_MS`). */
  pollMs: number;
  /**
   * Longest run of one attempt (`SVC_JOB_ATTEMPT_TIMEOUT_MS`): past it the attempt is stopped and
   * fails `timed out` (retried like any failure), so a stuck renderer or encoder cannot hold a
   * worker slot, and with it every job queued behind, for ever.
   */
  attemptTimeoutMs: number;
  /**
   * How long a finished job (`succeeded` or `failed`) stays readable before it is deleted
   * (`SVC_JOB_RETENTION_MS`): every generate request adds a row, and the table grew without bound.
   */
  retentionMs: number;
}

export const JOB_DEFAULTS = {
  runWorker: true,
  /**
   * Half the cores, at least one: a job is a face renderer plus an ffmpeg encoder, each able to
   * fill a core, and the same process serves live sessions (16 unbounded jobs once started 16
   * encoders on 2 cores).
   */
  concurrency: Math.max(1, Math.floor(availableParallelism() / 2)),
  /** Two: one organization's burst cannot take every worker slot from the others. */
  organizationConcurrency: 2,
  /**
   * 100: about 10 minutes of work at 2 jobs at a time (a job is 6 to 12 s here); more is a client
   * in a loop, whose backlog would sit in every claim's path and every other organization's wait.
   */
  maxQueuedPerOrganization: 100,
  /** Three: a crash or a passing fault is retried twice; a job that fails every time fails within a minute. */
  maxAttempts: 3,
  /** 5 s, then 10 s, ...: long enough for a restarted process or a recovered database. */
  retryBaseMs: 5_000,
  retryMaxMs: 5 * 60_000,
  /** The Session API's lease figures (sessions/session-store.ts): 15 s lease renewed every 5 s. */
  leaseMs: 15_000,
  heartbeatMs: 5_000,
  /** 1 s: a job queued in another process starts within a second; a claim query costs well under 1 ms. */
  pollMs: 1_000,
  /**
   * 10 minutes: an idle video takes 6 to 12 s here, a few times that on a busy small machine; 50
   * times it is a stuck job, not a slow one.
   */
  attemptTimeoutMs: 10 * 60_000,
  /** 30 days: long past any client polling its job; the result asset itself is kept (an asset of its own). */
  retentionMs: 30 * 24 * 3_600_000,
} as const satisfies JobSettings;

/** The finished-job sweep (hourly, with the upload sweep): a bounded amount per pass, oldest first. */
export const JOB_SWEEP = {
  batchRows: 1_000,
  maxBatches: 20,
} as const;

/**
 * `pollMs` on the embedded database (PGlite) unless set: only this process queues jobs there (it
 * wakes its worker when it does), and each look runs on the event loop (about 2 ms), so a worker
 * looks rarely and otherwise wakes when the next retry or lease expiry it read is due.
 */
export const EMBEDDED_JOB_POLL_MS = 30_000;

/** Upper bound for `SVC_JOB_MAX_ATTEMPTS`: beyond, a broken job would retry for hours. */
const MAX_ATTEMPTS_LIMIT = 20;

export function resolveJobSettings(input: Partial<JobSettings> = {}): JobSettings {
  const settings: JobSettings = { ...JOB_DEFAULTS, ...stripUndefined(input) };
  const whole = (name: keyof JobSettings, min: number, max = Number.MAX_SAFE_INTEGER) => {
    const v = settings[name] as number;
    if (!Number.isSafeInteger(v) || v < min || v > max) throw new Error(`job setting ${name} must be a whole number from ${min} to ${max}, got ${JSON.stringify(v)}`);
  };
  whole('concurrency', 1, 256);
  whole('organizationConcurrency', 1, 256);
  whole('maxQueuedPerOrganization', 1, 100_000);
  whole('maxAttempts', 1, MAX_ATTEMPTS_LIMIT);
  whole('retryBaseMs', 0);
  whole('retryMaxMs', 0);
  whole('leaseMs', 100);
  whole('heartbeatMs', 10);
  whole('pollMs', 10);
  whole('attemptTimeoutMs', 1_000, 24 * 3_600_000);
  // At most 100 years: a "forever" value put now() minus it out of PostgreSQL's range, and the sweep failed every hour.
  whole('retentionMs', 60_000, 100 * 365 * 24 * 3_600_000);
  if (settings.heartbeatMs * 2 > settings.leaseMs) throw new Error(`job heartbeat (${settings.heartbeatMs} ms) must be at most half the lease (${settings.leaseMs} ms)`);
  return settings;
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** Delay before attempt `attempt + 1` after attempt `attempt` failed: base x 2^(attempt-1), capped. */
export function retryDelayMs(settings: Pick<JobSettings, 'retryBaseMs' | 'retryMaxMs'>, attempt: number): number {
  return Math.min(settings.retryMaxMs, settings.retryBaseMs * 2 ** Math.max(0, attempt - 1));
}
