/**
 * The Session API's state in the database, shared by every server process on one PostgreSQL (or
 * the one process on embedded PGlite): admission, leases, release requests and the call record.
 *
 * - Admission counts the agent's live sessions (`starting` or `active` with a live lease) and
 *   reserves a slot in the same transaction, under a row lock on the agent, so two processes can
 *   never admit past `max_concurrency`.
 * - Every live session's lease is renewed by the process that runs it (`heartbeat`); a reaper in
 *   every process deletes sessions whose lease lapsed (their process died) and fails their calls.
 * - Every admitted session has exactly one AgentCall, written `active` at admission and ended
 *   exactly once (`finish` or the reaper, whichever comes first).
 * All times are the database's (`now()`), so clock differences between processes do not matter.
 */
import { randomUUID } from 'node:crypto';
import type { Db } from '../db/connect.ts';
import { preparedQuery } from '../db/prepared-query.ts';
import { AdmissionLine } from './admission-line.ts';
import { FAILED_TERMINATIONS, type TerminationReason } from '../../agent/session-contract.ts';

export const SESSION_LEASE = {
  /** A session's slot stays reserved this long after its process last renewed it. */
  leaseMs: 15_000,
  /** How often a process renews its sessions' leases and picks up release requests. */
  heartbeatMs: 5_000,
  /** How often every process looks for lapsed leases (a dead process's sessions). */
  reaperIntervalMs: 5_000,
  /** `retry_after_seconds` is never more than this (a waiting visitor checks again by then). */
  maxRetryAfterSeconds: 300,
  /** Recent completed calls whose median duration estimates when a busy slot frees up. */
  durationSampleSize: 50,
  /**
   * A failed write of a started session's `active` status is tried again after these delays (ms).
   * The status is what listings and operators see; the slot and the lease hold either way.
   */
  activeRetryDelaysMs: [500, 2_000, 5_000] as readonly number[],
} as const;

export interface AdmissionRequest {
  readonly agentId: string;
  readonly room: string;
  readonly roomProvider: string;
  readonly clientUserRef: string | null;
  readonly origin: string | null;
}

/**
 * Where an admitted session runs when it is not this process (the fleet, server/fleet): chosen
 * inside the admission transaction, after the agent's limit, so that its slot is taken with it.
 */
export type Placement<Target> = (trx: Db) => Promise<{ readonly runnerId: string; readonly target: Target } | { readonly why: 'full' | 'none' }>;

export interface AdmissionHooks<Target = never> {
  /** This process takes the bot (the capacity gate's lease), decided after the agent's limit. */
  readonly reserve?: () => boolean;
  /** The fleet's placement instead: the session row is `placed` on the runner it returns. */
  readonly place?: Placement<Target>;
}

export type Admission<Target = never> =
  | { readonly admitted: true; readonly sessionId: string; readonly callId: string; readonly organizationId: string; readonly appliedLimitSeconds: number; readonly placement?: { readonly runnerId: string; readonly target: Target } }
  | { readonly admitted: false; readonly reason: 'agent_not_found' | 'agent_unpublished' | 'server_busy' }
  /** Placement found no runner: `full` (alive runners, every slot taken, or starting/draining), `none` (no fresh heartbeat). */
  | { readonly admitted: false; readonly reason: 'no_runner'; readonly why: 'full' | 'none' }
  | { readonly admitted: false; readonly reason: 'concurrency_limit'; readonly live: number; readonly limit: number; readonly retryAfterSeconds: number };

export interface CallEnd {
  readonly terminationReason: TerminationReason;
  readonly failureReason: string | null;
  readonly participantCount: number;
  readonly metadata: Readonly<Record<string, unknown>>;
}

export interface ReapedSession {
  readonly sessionId: string;
  readonly agentId: string;
  readonly room: string;
  readonly runnerId: string | null;
}

/** Rolls the warm-up's transaction back (it never writes, and says so). */
class WarmedUp extends Error {}

const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));

type ConcurrencyRefusal = Extract<Admission, { reason: 'concurrency_limit' }>;

/** One batch decided in one statement (migration 005). */
const ADMIT_BATCH_SQL = 'select * from svc_admit_batch(?, ?::jsonb, ?, ?, ?)';

/** What an admitted session's row and call record carry in `metadata` (both admission paths). */
function sessionMetadata(request: AdmissionRequest, runnerId: string): Record<string, unknown> {
  return { origin: request.origin, room_provider: request.roomProvider, runner_id: runnerId };
}

/** `retry_after_seconds` from its readings (SessionStore.retryAfter, `svc_admit_batch`). */
function retryAfterFrom(row: { hard_end_s?: unknown; oldest_age_s?: unknown; p50_s?: unknown } | undefined): number {
  const hardEnd = num(row?.hard_end_s) ?? SESSION_LEASE.maxRetryAfterSeconds;
  const p50 = num(row?.p50_s);
  const oldestAge = num(row?.oldest_age_s) ?? 0;
  const typical = p50 === null ? hardEnd : Math.max(p50 - oldestAge, 5);
  return Math.min(SESSION_LEASE.maxRetryAfterSeconds, Math.max(1, Math.ceil(Math.min(hardEnd, typical))));
}

export class SessionStore {
  private readonly leaseSeconds: number;
  private readonly retries = new Set<NodeJS.Timeout>();
  private closed = false;
  private readonly line = new AdmissionLine<{ readonly request: AdmissionRequest; readonly hooks: AdmissionHooks<unknown> }, Admission<unknown>>((agentId, batch) => this.decide(agentId, batch));

  constructor(
    private readonly db: Db,
    /** This process's identity in `agent_sessions.runner_id`. */
    readonly runnerId: string,
    lease: { readonly leaseMs?: number } = {},
  ) {
    this.leaseSeconds = (lease.leaseMs ?? SESSION_LEASE.leaseMs) / 1000;
  }

  /**
   * Checks and reserves a slot: the agent exists and is published, its live sessions are under its
   * `max_concurrency` (row lock on the agent), and this process takes it (`reserve`: the capacity
   * gate's lease, synchronous; false means `server_busy`, and nothing is written for it). The
   * agent's limit answers first (429), and a process without capacity never records a call.
   * Connects for one agent are decided in batches, one at a time per agent (admission-line.ts),
   * each batch one statement (`decideHere`) or, when placing on a fleet, one transaction.
   */
  admit<Target = never>(request: AdmissionRequest, hooks: AdmissionHooks<Target> | (() => boolean) = {}): Promise<Admission<Target>> {
    const given: AdmissionHooks<Target> = typeof hooks === 'function' ? { reserve: hooks } : hooks;
    return this.line.admit(request.agentId, { request, hooks: given as AdmissionHooks<unknown> }) as Promise<Admission<Target>>;
  }

  /**
   * Runs the admission's reads once, for no agent, in a transaction that writes nothing and is
   * rolled back: the code paths and the connection's query plans are ready before the first
   * burst (its first decision took 32 ms cold, the ones behind it up to 50 ms; 5-15 ms warm).
   */
  async warmUp(): Promise<void> {
    const nobody = '00000000-0000-4000-8000-000000000000';
    await preparedQuery(this.db, 'svc_admit_batch', ADMIT_BATCH_SQL, [nobody, '[]', 0, this.leaseSeconds, SESSION_LEASE.durationSampleSize]);
    await this.db
      .transaction(async (trx) => {
        await trx('agents').where('agent_id', nobody).forUpdate().first('agent_id', 'organization_id', 'status', 'max_concurrency', 'session_limit_seconds');
        await trx('agent_sessions').where('agent_id', nobody).where('lease_expires_at', '>', trx.fn.now()).count('* as n').first();
        await this.retryAfter(trx, nobody);
        throw new WarmedUp();
      })
      .catch((err: unknown) => {
        if (!(err instanceof WarmedUp)) throw err;
      });
    // The writes too: rows for no agent, refused by the foreign key (nothing is written), each in
    // a transaction of its own (a refused statement ends its transaction).
    const row = { agent_id: nobody, organization_id: nobody, session_id: nobody, call_id: nobody, room: 'warm-up', applied_session_limit_seconds: 1, metadata: '{}' };
    for (const table of ['agent_sessions', 'agent_calls']) {
      await this.db.transaction((trx) => trx(table).insert([row])).catch(() => undefined);
    }
  }

  private decide(agentId: string, batch: readonly { readonly request: AdmissionRequest; readonly hooks: AdmissionHooks<unknown> }[]): Promise<Admission<unknown>[]> {
    // Placement on a fleet reads and locks runners per connect: a transaction of its own.
    return batch.some((b) => b.hooks.place) ? this.decideWithPlacement(agentId, batch) : this.decideHere(agentId, batch);
  }

  /**
   * A batch whose bots run on this process, in one statement (`svc_admit_batch`, migration 005):
   * the agent's row locked, its live sessions counted, the admitted rows written, and the inputs of
   * `retry_after_seconds` read, in one round trip, where the same steps as single statements took
   * five or six, each waiting for its answer behind the rest of the burst on the event loop.
   *
   * The process's capacity is taken first, in arrival order (`reserve`, each connect's own lease),
   * because the statement decides in the database: a connect that then falls past the agent's
   * limit gives its lease back with its refusal (live-sessions.ts). Meanwhile, for one round
   * trip, those leases are not free for other agents' connects. The outcome per connect is the
   * same as deciding them one by one: in arrival order, admitted while the agent's limit and the
   * process's capacity leave room; once the capacity is out, the rest are `server_busy`; once the
   * limit is reached, the rest are `concurrency_limit`.
   */
  private async decideHere(agentId: string, batch: readonly { readonly request: AdmissionRequest; readonly hooks: AdmissionHooks<unknown> }[]): Promise<Admission<unknown>[]> {
    let capacity = 0;
    for (const { hooks } of batch) {
      if (hooks.reserve && !hooks.reserve()) break;
      capacity++;
    }
    const candidates = batch.map(({ request }) => ({
      session_id: randomUUID(),
      call_id: randomUUID(),
      room: request.room,
      client_user_ref: request.clientUserRef,
      origin: request.origin,
      room_provider: request.roomProvider,
      runner_id: this.runnerId,
      metadata: sessionMetadata(request, this.runnerId),
    }));
    const [row] = await preparedQuery(this.db, 'svc_admit_batch', ADMIT_BATCH_SQL, [
      agentId, JSON.stringify(candidates), capacity, this.leaseSeconds, SESSION_LEASE.durationSampleSize,
    ]);
    if (row.outcome === 'agent_not_found' || row.outcome === 'agent_unpublished') return batch.map(() => ({ admitted: false, reason: row.outcome }) as const);
    const admitted = Number(row.admitted);
    const withinLimit = Number(row.within_limit);
    const limit = Number(row.max_concurrency);
    const live = Number(row.live) + admitted;
    const retryAfterSeconds = withinLimit < batch.length ? retryAfterFrom(row) : 0;
    return candidates.map((c, i): Admission<unknown> => {
      if (i < admitted) return { admitted: true, sessionId: c.session_id, callId: c.call_id, organizationId: row.organization_id, appliedLimitSeconds: Number(row.session_limit_seconds) };
      if (admitted < withinLimit) return { admitted: false, reason: 'server_busy' };
      return { admitted: false, reason: 'concurrency_limit', live, limit, retryAfterSeconds };
    });
  }

  private async decideWithPlacement(agentId: string, batch: readonly { readonly request: AdmissionRequest; readonly hooks: AdmissionHooks<unknown> }[]): Promise<Admission<unknown>[]> {
    return this.db.transaction(async (trx) => {
      const agent = await trx('agents').where('agent_id', agentId).forUpdate().first('agent_id', 'organization_id', 'status', 'max_concurrency', 'session_limit_seconds');
      if (!agent) return batch.map(() => ({ admitted: false, reason: 'agent_not_found' }) as const);
      if (agent.status !== 'published') return batch.map(() => ({ admitted: false, reason: 'agent_unpublished' }) as const);
      const limit = Number(agent.max_concurrency);
      let live = 0;
      if (limit !== -1) {
        const row = await trx('agent_sessions').where('agent_id', agentId).where('lease_expires_at', '>', trx.fn.now()).count('* as n').first();
        live = Number(row?.n ?? 0);
      }
      const appliedLimitSeconds = Number(agent.session_limit_seconds);
      let retryAfterSeconds: number | undefined;
      const sessions: Record<string, unknown>[] = [];
      const calls: Record<string, unknown>[] = [];
      const answers: Admission<unknown>[] = [];
      for (const { request, hooks } of batch) {
        if (limit !== -1 && live >= limit) {
          retryAfterSeconds ??= await this.retryAfter(trx, agentId);
          answers.push({ admitted: false, reason: 'concurrency_limit', live, limit, retryAfterSeconds });
          continue;
        }
        if (hooks.reserve && !hooks.reserve()) {
          answers.push({ admitted: false, reason: 'server_busy' });
          continue;
        }
        // Placement counts the runners' sessions in this transaction: the batch's earlier
        // placements are written before the next one chooses.
        const placed = hooks.place ? await hooks.place(trx) : null;
        if (placed && 'why' in placed) {
          answers.push({ admitted: false, reason: 'no_runner', why: placed.why });
          continue;
        }
        live++;
        const sessionId = randomUUID();
        const callId = randomUUID();
        const runnerId = placed ? placed.runnerId : this.runnerId;
        const metadata = JSON.stringify(sessionMetadata(request, runnerId));
        const session = {
          session_id: sessionId, agent_id: agentId, organization_id: agent.organization_id, room: request.room,
          client_user_ref: request.clientUserRef, applied_session_limit_seconds: appliedLimitSeconds, call_id: callId,
          status: placed ? 'placed' : 'starting', runner_id: runnerId, room_provider: request.roomProvider, origin: request.origin,
          lease_expires_at: trx.raw(`now() + make_interval(secs => ?)`, [this.leaseSeconds]), metadata,
        };
        const call = {
          call_id: callId, agent_id: agentId, organization_id: agent.organization_id, session_id: sessionId,
          applied_session_limit_seconds: appliedLimitSeconds, client_user_ref: request.clientUserRef,
          started_at: trx.fn.now(), status: 'active', participant_count: 0, metadata,
        };
        if (placed) {
          await trx('agent_sessions').insert(session);
          await trx('agent_calls').insert(call);
        } else {
          sessions.push(session);
          calls.push(call);
        }
        answers.push({ admitted: true, sessionId, callId, organizationId: agent.organization_id, appliedLimitSeconds, ...(placed ? { placement: placed } : {}) });
      }
      if (sessions.length) {
        // Both inserts in one statement (one round trip): the sessions in a data-modifying WITH.
        const first = trx('agent_sessions').insert(sessions).toSQL();
        const second = trx('agent_calls').insert(calls).toSQL();
        await trx.raw(`with admitted_sessions as (${first.sql}) ${second.sql}`, [...first.bindings, ...second.bindings]);
      }
      return answers;
    });
  }

  /**
   * When a slot is likely to free up, in whole seconds: the earlier of the soonest hard end among
   * the live sessions (start + applied limit) and, when the agent has history, the median length
   * of its recent calls minus the age of its oldest live session (at least 5 s once that is
   * overdue). Clamped to 1..maxRetryAfterSeconds.
   */
  private async retryAfter(trx: Db, agentId: string): Promise<number> {
    // One statement (one round trip inside the admission's transaction), the same readings as
    // `svc_admit_batch` takes (migration 005).
    const row = (await trx.raw('select * from svc_retry_after_inputs(?, ?)', [agentId, SESSION_LEASE.durationSampleSize])).rows[0];
    return retryAfterFrom(row);
  }

  /**
   * Marks a started session `active`. A failed write (a contended or briefly unreachable
   * database) is tried again in the background after each of `SESSION_LEASE.activeRetryDelaysMs`
   * until one succeeds or the store is closed; `onFailure` hears each failure and whether another
   * try follows. Resolves after the first try, whatever it did.
   */
  async markActive(sessionId: string, onFailure?: (err: unknown, willRetry: boolean) => void): Promise<void> {
    const attempt = async (tried: number): Promise<void> => {
      try {
        // Only a starting session: one that ended meanwhile (its row gone) or was taken over stays as it is.
        await this.db('agent_sessions').where({ session_id: sessionId, runner_id: this.runnerId, status: 'starting' }).update({ status: 'active' });
      } catch (err) {
        const delay = this.closed ? undefined : SESSION_LEASE.activeRetryDelaysMs[tried];
        onFailure?.(err, delay !== undefined);
        if (delay === undefined) return;
        const timer = setTimeout(() => {
          this.retries.delete(timer);
          void attempt(tried + 1);
        }, delay);
        timer.unref();
        this.retries.add(timer);
      }
    };
    await attempt(0);
  }

  /** Stops the background retries (the owner is closing); the store's queries still work. */
  close(): void {
    this.closed = true;
    for (const timer of this.retries) clearTimeout(timer);
    this.retries.clear();
  }

  /**
   * Ends a session: frees its slot and ends its call, once. Returns false when it had already
   * ended (e.g. the reaper failed it while this process stalled).
   */
  async finish(sessionId: string, callId: string, end: CallEnd, guard?: { readonly placedOn: string }): Promise<boolean> {
    return this.db.transaction(async (trx) => {
      if (guard) {
        // Only while it still waits on that runner: a runner that claimed it meanwhile owns it
        // (its bot runs, it records the call), and nothing is ended under it.
        const deleted = await trx('agent_sessions').where({ session_id: sessionId, status: 'placed', runner_id: guard.placedOn }).delete();
        if (Number(deleted) === 0) return false;
      } else await trx('agent_sessions').where('session_id', sessionId).delete();
      const failed = FAILED_TERMINATIONS.has(end.terminationReason);
      const updated = await trx('agent_calls')
        .where({ call_id: callId, status: 'active' })
        .update({
          status: failed ? 'failed' : 'completed',
          termination_reason: end.terminationReason,
          failure_reason: failed ? (end.failureReason ?? end.terminationReason) : null,
          ended_at: trx.fn.now(),
          participant_count: end.participantCount,
          metadata: trx.raw(`metadata || ?::jsonb`, [JSON.stringify(end.metadata)]),
        });
      return Number(updated) > 0;
    });
  }

  /**
   * Marks the live session in `room` as released, once. Returns its id and the process holding
   * it, or null when the room is unknown, already gone or already released.
   */
  async requestRelease(room: string): Promise<{ readonly sessionId: string; readonly runnerId: string | null } | null> {
    const rows = await this.db('agent_sessions')
      .where('room', room)
      .whereNull('release_requested_at')
      .where('lease_expires_at', '>', this.db.fn.now())
      .update({ release_requested_at: this.db.fn.now() })
      .returning(['session_id', 'runner_id']);
    const row = rows[0] as { session_id: string; runner_id: string | null } | undefined;
    return row ? { sessionId: row.session_id, runnerId: row.runner_id } : null;
  }

  /**
   * Renews the leases of `sessionIds`, the sessions this process runs (or is starting), and only
   * those: a row of this process's that it no longer handles (its end could not be recorded) must
   * lapse so that a reaper ends its call and frees its slot. Returns the sessions still held and
   * whether a release waits.
   */
  async heartbeat(sessionIds: readonly string[]): Promise<Map<string, { readonly releaseRequested: boolean }>> {
    if (sessionIds.length === 0) return new Map();
    const rows = await this.db('agent_sessions')
      .where('runner_id', this.runnerId)
      .whereIn('session_id', [...sessionIds])
      .update({ lease_expires_at: this.db.raw(`now() + make_interval(secs => ?)`, [this.leaseSeconds]) })
      .returning(['session_id', 'release_requested_at']);
    return new Map(rows.map((r: { session_id: string; release_requested_at: unknown }) => [r.session_id, { releaseRequested: r.release_requested_at != null }]));
  }

  /** Deletes sessions whose lease lapsed and fails their calls (`runner_lost`). */
  async reap(): Promise<ReapedSession[]> {
    // Nearly always nothing has lapsed: one plain read first, the deleting transaction only when it
    // finds a row (on the embedded database every statement runs on the event loop, live sessions'
    // frames included).
    const lapsed = await this.db('agent_sessions').where('lease_expires_at', '<=', this.db.fn.now()).first('session_id');
    if (!lapsed) return [];
    return this.db.transaction(async (trx) => {
      const rows = await trx('agent_sessions').where('lease_expires_at', '<=', trx.fn.now()).delete().returning(['session_id', 'agent_id', 'room', 'call_id', 'runner_id']);
      if (rows.length === 0) return [];
      await trx('agent_calls')
        .whereIn('call_id', rows.map((r: { call_id: string }) => r.call_id))
        .where('status', 'active')
        .update({
          status: 'failed', termination_reason: 'runner_lost', failure_reason: 'runner_lost', ended_at: trx.fn.now(),
          metadata: trx.raw(`metadata || ?::jsonb`, [JSON.stringify({ failure_detail: 'the server process running this session stopped renewing its lease' })]),
        });
      return rows.map((r: { session_id: string; agent_id: string; room: string; runner_id: string | null }) => ({ sessionId: r.session_id, agentId: r.agent_id, room: r.room, runnerId: r.runner_id }));
    });
  }

  /** Sessions this process holds according to the database (diagnostics, shutdown checks). */
  async held(): Promise<string[]> {
    return (await this.db('agent_sessions').where('runner_id', this.runnerId).select('session_id')).map((r: { session_id: string }) => r.session_id);
  }
}
