/**
 * A worker: claims due jobs from the queue up to its concurrency, runs each with the handler,
 * renews their leases by heartbeat, and reaps jobs whose worker died. Runs inside `npm start`
 * (default) or alone in `npm run worker` processes; any number of workers share one database.
 */
import { hostname } from 'node:os';
import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { ClaimedJob, JobQueue, OwnJobs } from './job-queue.ts';
import type { JobSettings } from './job-settings.ts';

/** What a handler's successful run leaves: the job's `result`, and writes to commit with it. */
export interface JobOutcome {
  readonly result: Record<string, unknown>;
  readonly alsoWrite?: (trx: Knex.Transaction) => Promise<void>;
}

export interface JobContext {
  /**
   * Aborted when the worker closes, when the job's claim is lost (another worker owns it now), or
   * at the attempt's time limit (`attemptTimeoutMs`; the reason is then an `AttemptTimeout`): stop
   * promptly, a handler still running 5 s later is left behind.
   */
  readonly signal: AbortSignal;
  /** Whether this claim is still held; check before a side effect another owner could repeat. */
  stillHeld(): Promise<boolean>;
}

export type JobHandler = (job: ClaimedJob, context: JobContext) => Promise<JobOutcome>;

/**
 * Reason classes of failed attempts (the `reason` label of `svc_job_failures_total`; a bounded
 * set, the job's own `error` keeps the full text): `interrupted` (the worker running it stopped:
 * its lease lapsed), `source_missing` (its input is gone), `generator_failed` (the generator threw:
 * an undecodable image, ffmpeg failing), `storage_failed` (reading the input or storing the result
 * failed), `timed_out` (the attempt ran past `attemptTimeoutMs`), `other` (anything unclassified,
 * e.g. the database).
 */
export const JOB_FAILURE_REASONS = ['interrupted', 'source_missing', 'generator_failed', 'storage_failed', 'timed_out', 'other'] as const;
export type JobFailureReason = (typeof JOB_FAILURE_REASONS)[number];

/** Failed attempts recorded by a worker, by reason class: `retrying` (queued again) or `failed` (the last attempt). */
export type JobFailureCounts = Readonly<Partial<Record<JobFailureReason, { readonly retrying: number; readonly failed: number }>>>;

const FAILURE_REASON = Symbol('svc.jobFailureReason');

/** Marks `err` with the reason class its failed attempt counts under, and returns it (to throw). */
export function withFailureReason(err: unknown, reason: JobFailureReason): unknown {
  if (err !== null && typeof err === 'object' && !(FAILURE_REASON in err)) Object.defineProperty(err, FAILURE_REASON, { value: reason, configurable: true });
  return err;
}

/** A `.catch` handler rethrowing the error marked with `reason`: `await step().catch(failedAs('storage_failed'))`. */
export function failedAs(reason: JobFailureReason): (err: unknown) => never {
  return (err) => {
    throw withFailureReason(err, reason);
  };
}

function failureReasonOf(err: unknown): JobFailureReason {
  return err !== null && typeof err === 'object' && FAILURE_REASON in err ? (err as { [FAILURE_REASON]: JobFailureReason })[FAILURE_REASON] : 'other';
}

interface Running {
  readonly job: ClaimedJob;
  readonly abort: AbortController;
  readonly done: Promise<void>;
}

/** How long a handler stopped at its attempt's time limit may take to end before its slot is freed regardless. */
const STOP_GRACE_MS = 5_000;

/** The reason an attempt's signal is aborted with at its time limit. */
export class AttemptTimeout extends Error {}

const timedOut = (signal: AbortSignal) => signal.aborted && signal.reason instanceof AttemptTimeout;

export class JobWorker {
  /** `host:pid:random`: names this worker in `runner_id` (several workers may share a pid in tests). */
  readonly runnerId = `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  private readonly running = new Map<string, Running>();
  private timers: NodeJS.Timeout[] = [];
  /** A one-shot wake at the next retry or lease expiry the last look read (before the next poll). */
  private nextWake: { atMs: number; timer: NodeJS.Timeout } | null = null;
  private closing = false;
  private passing: Promise<void> | null = null;
  private passAgain = false;
  private lastReapMs = 0;
  private readonly failureCounts: Partial<Record<JobFailureReason, { retrying: number; failed: number }>> = {};

  constructor(
    private readonly queue: JobQueue,
    private readonly settings: Pick<JobSettings, 'concurrency' | 'heartbeatMs' | 'pollMs' | 'attemptTimeoutMs'>,
    private readonly handler: JobHandler,
    private readonly logger: Pick<Logger, 'info' | 'warn' | 'error'>,
  ) {}

  start(): this {
    const poll = setInterval(() => this.wake(), this.settings.pollMs);
    const heartbeat = setInterval(() => void this.heartbeat(), this.settings.heartbeatMs);
    poll.unref();
    heartbeat.unref();
    this.timers = [poll, heartbeat];
    this.wake();
    return this;
  }

  /** Jobs this worker runs now. */
  get active(): number {
    return this.running.size;
  }

  /** Failed attempts this worker recorded (its own jobs, and others' it reaped), for metrics. */
  failures(): JobFailureCounts {
    return Object.fromEntries(Object.entries(this.failureCounts).map(([reason, c]) => [reason, { ...c }]));
  }

  private countFailure(reason: JobFailureReason, outcome: 'retrying' | 'failed'): void {
    (this.failureCounts[reason] ??= { retrying: 0, failed: 0 })[outcome]++;
  }

  /** Looks for work now (a job was just queued in this process); passes coalesce. */
  wake(): void {
    if (this.closing) return;
    if (this.passing) {
      this.passAgain = true;
      return;
    }
    this.passing = this.pass()
      .catch((err) => this.logger.warn({ err }, 'job worker: claiming failed; retrying at the next poll'))
      .finally(() => {
        this.passing = null;
        if (this.passAgain) {
          this.passAgain = false;
          this.wake();
        }
      });
  }

  /** Resolves once none of this worker's jobs runs (more may be claimed later). */
  async idle(): Promise<void> {
    while (this.running.size || this.passing) await Promise.allSettled([...[...this.running.values()].map((r) => r.done), this.passing]);
  }

  /**
   * Stops claiming, stops its running jobs and gives them back to the queue without counting the
   * attempt (another worker, or this process restarted, runs them again).
   */
  async close(): Promise<void> {
    this.closing = true;
    const [poll, heartbeat] = this.timers;
    clearInterval(poll);
    if (this.nextWake) clearTimeout(this.nextWake.timer);
    this.nextWake = null;
    for (const r of this.running.values()) r.abort.abort(new Error('the worker is shutting down'));
    // The heartbeat goes on until the last job stopped: a job slow to stop keeps its lease, so
    // that no other worker starts it again while it still runs here.
    try {
      await this.idle();
    } finally {
      clearInterval(heartbeat);
    }
  }

  /** This worker's id and the jobs it runs now (an orphan of its own is reaped like anyone's). */
  private mine(): OwnJobs {
    return { runnerId: this.runnerId, jobIds: [...this.running.keys()] };
  }

  private async pass(): Promise<void> {
    const reapDue = Date.now() - this.lastReapMs >= this.settings.pollMs;
    if (!reapDue && this.running.size >= this.settings.concurrency) return;
    // Most passes find nothing to do: one cheap read first, the locking transactions only when it
    // says there is something for them.
    const pending = await this.queue.pending(this.mine());
    this.wakeAt(pending.nextAtMs);
    if (reapDue) {
      this.lastReapMs = Date.now();
      for (const r of pending.lapsed ? await this.queue.reapLapsed(this.mine()) : []) {
        this.countFailure('interrupted', r.status === 'failed' ? 'failed' : 'retrying');
        this.logger.warn({ job_id: r.job_id, runner_id: r.runner_id, status: r.status }, 'job worker: reclaimed a job whose worker stopped');
      }
    }
    // A reap just queued its jobs again (after their backoff): they are not due now either.
    if (!pending.due) return;
    while (!this.closing && this.running.size < this.settings.concurrency) {
      const job = await this.queue.claim(this.runnerId);
      if (!job) return;
      if (this.closing) {
        // close() came while this claim was in flight: not started (close() would not abort it),
        // given back at once without spending its attempt.
        await this.queue.release(job).catch((err) => this.logger.warn({ err, job_id: job.job_id }, 'job worker: could not give a job back at shutdown; it is reclaimed when its lease lapses'));
        return;
      }
      this.startJob(job);
    }
  }

  /** Wakes at `atMs` (epoch ms) when that comes before the next poll and any wake already set. */
  private wakeAt(atMs: number | null): void {
    if (atMs === null || this.closing) return;
    const delay = Math.max(0, atMs - Date.now()) + 5; // just past it: the database's clock decides
    if (delay >= this.settings.pollMs) return;
    if (this.nextWake && this.nextWake.atMs <= atMs) return;
    if (this.nextWake) clearTimeout(this.nextWake.timer);
    const timer = setTimeout(() => {
      this.nextWake = null;
      this.wake();
    }, delay);
    timer.unref();
    this.nextWake = { atMs, timer };
  }

  private startJob(job: ClaimedJob): void {
    const abort = new AbortController();
    const context: JobContext = { signal: abort.signal, stillHeld: () => this.queue.holds(job) };
    const entry: { job: ClaimedJob; abort: AbortController; done: Promise<void> } = { job, abort, done: Promise.resolve() };
    entry.done = this.run(job, context, abort).finally(() => {
      // Only its own entry: a lost earlier run of the same job, still stopping when this worker
      // claimed the job again, must not drop the new run (its renewals, its exclusion from reaping).
      if (this.running.get(job.job_id) === entry) this.running.delete(job.job_id);
      this.wake(); // a slot is free
    });
    this.running.set(job.job_id, entry);
  }

  private async run(job: ClaimedJob, context: JobContext, abort: AbortController): Promise<void> {
    const log = { job_id: job.job_id, attempt: job.attempts, max_attempts: job.max_attempts };
    const limitMs = this.settings.attemptTimeoutMs;
    let timer: NodeJS.Timeout | undefined;
    let grace: NodeJS.Timeout | undefined;
    // At the time limit the attempt's signal is aborted; a handler that does not end within the
    // grace after it is left behind (its slot freed, its late result never recorded).
    const leftBehind = new Promise<'left'>((resolve) => {
      timer = setTimeout(() => {
        abort.abort(new AttemptTimeout(`timed out: the attempt ran longer than ${limitMs} ms (SVC_JOB_ATTEMPT_TIMEOUT_MS) and was stopped`));
        grace = setTimeout(() => resolve('left'), STOP_GRACE_MS);
        grace.unref();
      }, limitMs);
      timer.unref();
    });
    try {
      const handled = this.handler(job, context);
      handled.catch(() => undefined); // when left behind, its end is nobody's
      const outcome = await Promise.race([handled, leftBehind]);
      if (outcome === 'left') {
        this.logger.error(log, `job worker: a job did not stop within ${STOP_GRACE_MS} ms of its time limit; its slot is freed and its late result will be discarded`);
        throw context.signal.reason;
      }
      // Finished within the grace after its time limit: the work is done, so it counts (a failure
      // now would leave its stored result behind a failed job).
      if (context.signal.aborted && !timedOut(context.signal)) throw context.signal.reason;
      if (!(await this.queue.succeed(job, outcome.result, outcome.alsoWrite))) this.logger.warn(log, 'job worker: finished a job another worker had reclaimed; its result is discarded');
    } catch (caught) {
      const stopped = timedOut(context.signal);
      // Stopped at its time limit: that is the reason, whatever the handler threw on its way out (a
      // fresh error: the signal's own reason may have been marked with another class on the way).
      const err = stopped ? withFailureReason(new Error((context.signal.reason as Error).message), 'timed_out') : caught;
      if (this.closing) {
        await this.queue.release(job).catch((e) => this.logger.warn({ ...log, err: e }, 'job worker: could not give a job back at shutdown; it is reclaimed when its lease lapses'));
        return;
      }
      if (context.signal.aborted && !stopped && !(await this.queue.holds(job).catch(() => false))) return; // lost: someone else runs it
      const reason = (err as Error)?.message || 'generation failed';
      const outcome = await this.queue.fail(job, reason).catch((e) => {
        this.logger.error({ ...log, err: e }, 'job worker: could not record a failed attempt; it is retried when its lease lapses');
        return 'lost' as const;
      });
      if (outcome !== 'lost') this.countFailure(failureReasonOf(err), outcome);
      const message = { failed: 'job failed after its last attempt', retrying: 'job attempt failed; retrying after the backoff', lost: 'job attempt ended after the job was taken over; nothing recorded' }[outcome];
      this.logger.warn({ ...log, err, outcome }, message);
    } finally {
      clearTimeout(timer);
      clearTimeout(grace);
    }
  }

  private async heartbeat(): Promise<void> {
    for (const r of [...this.running.values()]) {
      // Lost: stopping already. One stopping at its time limit keeps its lease until it stopped or
      // was left behind, so that no other worker starts it again meanwhile.
      if (r.abort.signal.aborted && !this.closing && !timedOut(r.abort.signal)) continue;
      const held = await this.queue.renew(r.job).catch((err) => {
        this.logger.warn({ err, job_id: r.job.job_id }, 'job worker: lease renewal failed; retrying');
        return true; // the database is unreachable, not our claim lost: keep working, the lease decides
      });
      if (!held) {
        this.logger.warn({ job_id: r.job.job_id }, 'job worker: lost a job (its lease lapsed and another worker took it); stopping it');
        r.abort.abort(new Error('lease lost'));
      }
    }
  }
}
