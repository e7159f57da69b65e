/**
 * The job queue is the `generation_jobs` table itself (docs/jobs.md): no second store whose state
 * could disagree with the status the API reports. Every transition is one statement or one short
 * transaction, and every change a worker makes to a job it runs is fenced by its claim
 * (`runner_id` and `attempts`), so a worker that lost its job (lease lapsed, reclaimed elsewhere)
 * can never overwrite what the new owner did. All times are the database's `now()`.
 */
import type { Knex } from 'knex';
import { affectedRows, type Db } from '../db/connect.ts';
import { JOB_SWEEP, type JobSettings } from './job-settings.ts';

const TABLE = 'generation_jobs';
/** Claims are serialized by this transaction-scoped advisory lock, so that the per-organization
 * count a claim checks cannot be raced by another process's claim (claims take well under 1 ms). */
const CLAIM_LOCK_KEY = 'svc.generation_jobs.claim';

/** A claimed job: its row as stored, `attempts` already counting this attempt. */
export interface ClaimedJob {
  readonly job_id: string;
  readonly organization_id: string;
  readonly attempts: number;
  readonly max_attempts: number;
  readonly runner_id: string;
  readonly [column: string]: unknown;
}

/** Which claim a fenced change applies to. */
export type Claim = Pick<ClaimedJob, 'job_id' | 'runner_id' | 'attempts'>;

export type FailOutcome = 'retrying' | 'failed' | 'lost';

/** A worker's id and the jobs it runs now (`runner_id`, `job_id`). */
export interface OwnJobs {
  readonly runnerId: string;
  readonly jobIds: readonly string[];
}

/** A WHERE fragment and its bindings: a running row that is not one of `mine`. */
function notMine(mine: OwnJobs | undefined): [string, Knex.RawBinding[]] {
  if (!mine || mine.jobIds.length === 0) return ['true', []];
  return [`(runner_id IS NULL OR runner_id <> ? OR NOT (job_id::text = ANY(?::text[])))`, [mine.runnerId, [...mine.jobIds]]];
}

export class JobQueue {
  constructor(
    private readonly db: Db,
    private readonly settings: Pick<JobSettings, 'organizationConcurrency' | 'leaseMs' | 'retryBaseMs' | 'retryMaxMs'>,
  ) {}

  /**
   * Claims the oldest due queued job whose organization runs fewer than `organizationConcurrency`
   * jobs (live leases, any worker), or returns null.
   */
  async claim(runnerId: string): Promise<ClaimedJob | null> {
    return this.db.transaction(async (trx) => {
      await trx.raw('SELECT pg_advisory_xact_lock(hashtext(?))', [CLAIM_LOCK_KEY]);
      const { rows } = await trx.raw(
        // The organizations running their share are found once (from the running rows), not per
        // queued row: a backlog of one organization at its share is passed over by a hash lookup
        // per row, not a count per row (and it is bounded: SVC_JOB_MAX_QUEUED).
        `WITH full_orgs AS (
           SELECT r.organization_id FROM ${TABLE} r
           WHERE r.status = 'running' AND r.lease_expires_at > clock_timestamp()
           GROUP BY r.organization_id HAVING count(*) >= ?)
         UPDATE ${TABLE} SET status = 'running', attempts = attempts + 1, runner_id = ?,
           lease_expires_at = clock_timestamp() + make_interval(secs => ?), updated_at = clock_timestamp()
         WHERE job_id = (
           SELECT j.job_id FROM ${TABLE} j
           WHERE j.status = 'queued' AND j.run_after <= clock_timestamp()
             AND NOT EXISTS (SELECT 1 FROM full_orgs f WHERE f.organization_id = j.organization_id)
           ORDER BY j.run_after, j.created_at, j.job_id
           LIMIT 1
           FOR UPDATE SKIP LOCKED)
         RETURNING *`,
        [this.settings.organizationConcurrency, runnerId, this.settings.leaseMs / 1000],
      );
      return (rows[0] as ClaimedJob | undefined) ?? null;
    });
  }

  /** Renews the lease of a claim; false when the claim is no longer this worker's (stop working on it). */
  async renew(claim: Claim): Promise<boolean> {
    const n = await this.fenced(this.db, claim).update({
      lease_expires_at: this.db.raw('clock_timestamp() + make_interval(secs => ?)', [this.settings.leaseMs / 1000]),
      updated_at: this.db.fn.now(),
    });
    return n === 1;
  }

  /** Whether the claim is still this worker's with a live lease. */
  async holds(claim: Claim): Promise<boolean> {
    const row = await this.fenced(this.db, claim).where('lease_expires_at', '>', this.db.raw('clock_timestamp()')).first('job_id');
    return Boolean(row);
  }

  /**
   * Ends the claim `succeeded` with `result`, running `alsoWrite` in the same transaction; false
   * (and nothing written) when the claim was lost meanwhile.
   */
  async succeed(claim: Claim, result: Record<string, unknown>, alsoWrite?: (trx: Knex.Transaction) => Promise<void>): Promise<boolean> {
    return this.db.transaction(async (trx) => {
      const row = await this.fenced(trx, claim).forUpdate().first('job_id');
      if (!row) return false;
      await alsoWrite?.(trx);
      await trx(TABLE).where('job_id', claim.job_id).update({
        status: 'succeeded', result: JSON.stringify(result), error: null, runner_id: null, lease_expires_at: null, updated_at: trx.fn.now(),
      });
      return true;
    });
  }

  /** The attempt failed: queued again after the backoff delay, or `failed` with `reason` when it was the last. */
  async fail(claim: Claim, reason: string): Promise<FailOutcome> {
    return this.db.transaction(async (trx) => {
      const row = await this.fenced(trx, claim).forUpdate().first('attempts', 'max_attempts');
      if (!row) return 'lost';
      await trx(TABLE).where('job_id', claim.job_id).update(this.afterFailure(trx, reason));
      return row.attempts >= row.max_attempts ? 'failed' : 'retrying';
    });
  }

  /**
   * Gives the claim back without counting the attempt (graceful shutdown: the work was stopped,
   * not failed); due again at once for another worker.
   */
  async release(claim: Claim): Promise<boolean> {
    const n = await this.fenced(this.db, claim).update({
      status: 'queued', attempts: this.db.raw('greatest(attempts - 1, 0)'), runner_id: null, lease_expires_at: null, run_after: this.db.fn.now(), updated_at: this.db.fn.now(),
    });
    return n === 1;
  }

  /**
   * Running jobs whose lease lapsed (their worker died, was killed, or lost the database for a
   * whole lease) count as a failed attempt: queued again with backoff, or failed. Returns them.
   * A worker passes what it runs now (`mine`): those jobs are alive as long as it runs (a stalled
   * event loop that lets a lease lapse renews it at its next heartbeat, unless another worker
   * reaped it). Its other rows are orphans (an attempt whose end it could not record: the database
   * failed then) and are reaped like anyone's.
   */
  async reapLapsed(mine?: OwnJobs): Promise<Array<{ job_id: string; status: string; runner_id: string | null }>> {
    const reason = 'interrupted: the worker running this job stopped (its lease lapsed)';
    return this.db.transaction(async (trx) => {
      const lapsed = await trx(TABLE)
        .where('status', 'running')
        .where((q) => q.whereNull('lease_expires_at').orWhere('lease_expires_at', '<=', trx.raw('clock_timestamp()')))
        .whereRaw(...notMine(mine))
        .forUpdate()
        .skipLocked()
        .select('job_id', 'runner_id');
      if (!lapsed.length) return [];
      const updated = await trx(TABLE)
        .whereIn('job_id', lapsed.map((r) => r.job_id))
        .update(this.afterFailure(trx, reason))
        .returning(['job_id', 'status']);
      const runners = new Map(lapsed.map((r) => [r.job_id as string, r.runner_id as string | null]));
      return updated.map((r: { job_id: string; status: string }) => ({ ...r, runner_id: runners.get(r.job_id) ?? null }));
    });
  }

  /**
   * One cheap read answering whether a claim or a reap would find anything: is a queued job due,
   * is a running job (not one of `mine`) past its lease; and when the next of either will be
   * (`nextAtMs`, epoch ms, null when nothing is waiting). Workers ask it before the claim and
   * reap transactions (row locks, an advisory lock, an UPDATE): on the embedded database those run
   * on the event loop, about 4 and 1.5 ms, once a second for nothing most of the time.
   */
  async pending(mine?: OwnJobs): Promise<{ due: boolean; lapsed: boolean; nextAtMs: number | null }> {
    const [others, args] = notMine(mine);
    const { rows } = await this.db.raw(
      `SELECT EXISTS (SELECT 1 FROM ${TABLE} WHERE status = 'queued' AND run_after <= clock_timestamp()) AS due,
              EXISTS (SELECT 1 FROM ${TABLE} WHERE status = 'running'
                        AND (lease_expires_at IS NULL OR lease_expires_at <= clock_timestamp())
                        AND ${others}) AS lapsed,
              (SELECT min(t) FROM (
                 SELECT min(run_after) AS t FROM ${TABLE} WHERE status = 'queued' AND run_after > clock_timestamp()
                 UNION ALL
                 SELECT min(lease_expires_at) FROM ${TABLE} WHERE status = 'running' AND lease_expires_at > clock_timestamp()
                   AND ${others}) AS upcoming) AS next_at`,
      [...args, ...args],
    );
    const row = rows[0] as { due: boolean; lapsed: boolean; next_at: Date | string | null };
    const nextAtMs = row.next_at === null ? null : new Date(row.next_at).getTime();
    return { due: row.due === true, lapsed: row.lapsed === true, nextAtMs: Number.isFinite(nextAtMs) ? nextAtMs : null };
  }

  /** Jobs running or due now (not those waiting for a retry): `settled()` waits for none. */
  async busy(): Promise<number> {
    const row = await this.db(TABLE)
      .where('status', 'running')
      .orWhere((q) => q.where('status', 'queued').where('run_after', '<=', this.db.raw('clock_timestamp()')))
      .count('* as n')
      .first();
    return Number(row?.n ?? 0);
  }

  /**
   * Deletes finished jobs (`succeeded`, `failed`) last updated more than `retentionMs` ago, oldest
   * first, `JOB_SWEEP.batchRows` a statement and at most `JOB_SWEEP.maxBatches` statements a pass
   * (a first pass over a long-lived table does not hold the database); returns how many.
   */
  async sweepFinished(retentionMs: number): Promise<number> {
    let deleted = 0;
    for (let batch = 0; batch < JOB_SWEEP.maxBatches; batch++) {
      const oldest = this.db(TABLE)
        .select('job_id')
        .whereIn('status', ['succeeded', 'failed'])
        .where('updated_at', '<', this.db.raw('now() - make_interval(secs => ?)', [retentionMs / 1000]))
        .orderBy('updated_at')
        .limit(JOB_SWEEP.batchRows);
      const n = affectedRows(await this.db(TABLE).whereIn('job_id', oldest).delete());
      deleted += n;
      if (n < JOB_SWEEP.batchRows) break;
    }
    return deleted;
  }

  /** Jobs `queued` (due or waiting for a retry) and `running`, whichever worker holds them (metrics). */
  async depth(): Promise<{ queued: number; running: number }> {
    const rows: Array<{ status: string; n: string | number }> = await this.db(TABLE).whereIn('status', ['queued', 'running']).groupBy('status').select('status').count('* as n');
    const depth = { queued: 0, running: 0 };
    for (const r of rows) depth[r.status as keyof typeof depth] = Number(r.n);
    return depth;
  }

  private fenced(q: Knex | Knex.Transaction, claim: Claim) {
    return q(TABLE).where({ job_id: claim.job_id, runner_id: claim.runner_id, attempts: claim.attempts, status: 'running' });
  }

  /** Column values after a failed attempt, computed from the row's own attempts (SQL, one statement). */
  private afterFailure(trx: Knex.Transaction, reason: string) {
    const last = 'attempts >= max_attempts';
    const { retryBaseMs, retryMaxMs } = this.settings;
    return {
      status: trx.raw(`CASE WHEN ${last} THEN 'failed' ELSE 'queued' END`),
      error: trx.raw(`CASE WHEN ${last} THEN ?::text ELSE NULL END`, [reason]),
      last_error: reason,
      run_after: trx.raw(`clock_timestamp() + make_interval(secs => least(?::float8, ?::float8 * power(2, greatest(attempts - 1, 0))) / 1000)`, [retryMaxMs, retryBaseMs]),
      runner_id: null,
      lease_expires_at: null,
      updated_at: trx.fn.now(),
    };
  }
}
