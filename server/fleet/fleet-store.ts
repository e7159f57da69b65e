/**
 * The fleet's state in PostgreSQL (docs/deployment.md): the runner registry (`session_runners`,
 * migration 004) and the two steps of a session that the single-process SessionStore does not
 * have: placement (API processes) and the claim (runners). Everything else about a session, its
 * lease, release requests, its end and its call record, is SessionStore's, used as it is.
 *
 * - `admitAndPlace` is the admission transaction of SessionStore (batched; the agent's row lock,
 *   the published check, its live sessions against `max_concurrency`) with the placement as its
 *   hook, after the agent's limit: the ready
 *   runners with a fresh heartbeat are locked (in id order: two API processes never deadlock),
 *   their placed sessions counted, and the session inserted on the one with the most free slots
 *   (status `placed`). Two API processes placing at once are serialised on the runner rows, so a
 *   runner is never given more sessions than its slots.
 * - `claim` (runner): `placed` -> `starting`, only on the runner it was placed on; `movePlacement`
 *   (API, after a runner refused or did not answer) only while it is still `placed`: exactly one
 *   of them wins, so a slow runner never runs a session that was moved elsewhere.
 * - `renew` (runner): the leases of the sessions it runs, and only those: a session placed on it
 *   that it never claimed lapses and is reaped, and a runner that comes back under the same id
 *   after a crash does not keep its lost sessions alive.
 * All times are the database's.
 */
import type { Db } from '../db/connect.ts';
import type { Admission, AdmissionRequest, SessionStore } from '../sessions/session-store.ts';

export const FLEET = {
  /** How often a runner renews its registry row (and its sessions' leases). */
  runnerHeartbeatMs: 2_000,
  /**
   * A runner whose last heartbeat is older than this is not placed on: its first missed
   * heartbeat (plus a margin for a loaded machine) takes it out of placement.
   */
  runnerStaleMs: 5_000,
  /** How long an API process waits for a runner to start a bot before it tries the next runner. */
  startTimeoutMs: 10_000,
  /** The release nudge to a runner (best effort; the runner's heartbeat picks the release up anyway). */
  releaseNudgeTimeoutMs: 1_000,
  /** SIGTERM on a runner: its live sessions get this long to end before they end `server_shutdown`. */
  drainTimeoutMs: 10 * 60_000,
} as const;

export type RunnerState = 'starting' | 'ready' | 'draining';

export interface RunnerLoad {
  readonly cpu_share: number;
  readonly late_frame_share: number;
  readonly event_loop_lag_ms: number;
}

export interface RunnerRow {
  readonly runnerId: string;
  readonly url: string;
  readonly slots: number;
  readonly liveSessions: number;
  /** Sessions placed on it with a live lease (what placement counts). */
  readonly placed: number;
  readonly load: Partial<RunnerLoad>;
  readonly state: string;
  readonly startedAt: Date;
  readonly heartbeatAt: Date;
  /** Seconds since its last heartbeat. */
  readonly heartbeatAgeSeconds: number;
  /** Ready, heartbeat fresh: placement may choose it. */
  readonly placeable: boolean;
}

export interface RunnerTarget {
  readonly runnerId: string;
  readonly url: string;
}

/** A placed session as its runner claims it (what the runner needs comes from the database, not the request). */
export interface ClaimedSession {
  readonly sessionId: string;
  readonly callId: string;
  readonly agentId: string;
  readonly organizationId: string;
  readonly room: string;
  readonly clientUserRef: string | null;
  readonly appliedLimitSeconds: number;
  /** Seconds since admission (the session's limit counts from then). */
  readonly ageSeconds: number;
}

export class FleetStore {
  private readonly leaseSeconds: number;
  private readonly staleSeconds: number;

  constructor(
    private readonly db: Db,
    options: { readonly leaseMs: number; readonly runnerStaleMs?: number },
  ) {
    this.leaseSeconds = options.leaseMs / 1000;
    this.staleSeconds = (options.runnerStaleMs ?? FLEET.runnerStaleMs) / 1000;
  }

  // ---- API processes ------------------------------------------------------------------------

  /**
   * Admission and placement in one transaction: SessionStore's batched admission (the agent's row
   * lock, the published check, its live sessions against `max_concurrency`, the refusal's
   * retry_after) with this placement as its hook. Writes nothing unless admitted.
   */
  async admitAndPlace(sessions: SessionStore, request: AdmissionRequest): Promise<Admission<RunnerTarget>> {
    return sessions.admit<RunnerTarget>(request, {
      place: async (trx) => {
        const choice = await this.choose(trx, []);
        return 'why' in choice ? choice : { runnerId: choice.runnerId, target: choice };
      },
    });
  }

  /**
   * A runner refused the session or did not answer: moves it to the next best runner not in
   * `tried` (its slot reserved as at admission). `not_placed`: the session is no longer waiting
   * on `from` (that runner claimed it after all, or it ended); `full` / `none`: no runner left.
   */
  async movePlacement(sessionId: string, from: string, tried: readonly string[]): Promise<RunnerTarget | { readonly why: 'full' | 'none' | 'not_placed' }> {
    return this.db.transaction(async (trx) => {
      const row = await trx('agent_sessions').where({ session_id: sessionId, runner_id: from, status: 'placed' }).forUpdate().first('call_id');
      if (!row) return { why: 'not_placed' } as const;
      const choice = await this.choose(trx, tried);
      if ('why' in choice) return choice;
      await trx('agent_sessions').where({ session_id: sessionId }).update({
        runner_id: choice.runnerId,
        metadata: trx.raw(`metadata || ?::jsonb`, [JSON.stringify({ runner_id: choice.runnerId })]),
      });
      await trx('agent_calls').where({ call_id: row.call_id }).update({ metadata: trx.raw(`metadata || ?::jsonb`, [JSON.stringify({ runner_id: choice.runnerId })]) });
      return choice;
    });
  }

  /**
   * Inside a transaction: locks the placeable runners (ready, fresh heartbeat, not in `exclude`)
   * in id order, counts their placed sessions, and returns the one with the most free slots (the
   * lower CPU share on a tie, then the one placed on least recently by id order).
   */
  private async choose(trx: Db, exclude: readonly string[]): Promise<RunnerTarget | { readonly why: 'full' | 'none' }> {
    const runners = (await trx.raw(
      `select runner_id, url, slots, coalesce((load->>'cpu_share')::float8, 0) as cpu
         from session_runners
        where state = 'ready' and heartbeat_at > now() - make_interval(secs => ?) and not (runner_id = any(?::text[]))
        order by runner_id
        for update`,
      [this.staleSeconds, [...exclude]],
    )).rows as { runner_id: string; url: string; slots: number; cpu: number }[];
    if (runners.length === 0) {
      // Runners alive but starting or draining (a rolling deploy): busy, retry soon; none alive: none.
      const alive = (await trx.raw(`select count(*)::int as n from session_runners where heartbeat_at > now() - make_interval(secs => ?) and not (runner_id = any(?::text[]))`, [this.staleSeconds, [...exclude]])).rows[0] as { n: number };
      return { why: Number(alive.n) > 0 ? 'full' : 'none' };
    }
    const counts = (await trx.raw(
      `select runner_id, count(*)::int as n from agent_sessions
        where runner_id = any(?::text[]) and lease_expires_at > now() group by runner_id`,
      [runners.map((r) => r.runner_id)],
    )).rows as { runner_id: string; n: number }[];
    const placed = new Map(counts.map((c) => [c.runner_id, Number(c.n)]));
    let best: { runner: (typeof runners)[number]; free: number } | null = null;
    for (const runner of runners) {
      const free = Number(runner.slots) - (placed.get(runner.runner_id) ?? 0);
      if (free <= 0) continue;
      if (!best || free > best.free || (free === best.free && Number(runner.cpu) < Number(best.runner.cpu))) best = { runner, free };
    }
    return best ? { runnerId: best.runner.runner_id, url: best.runner.url } : { why: 'full' };
  }

  /** The advertised URL of a runner (null: not registered). */
  async runnerUrl(runnerId: string): Promise<string | null> {
    const row = await this.db('session_runners').where('runner_id', runnerId).first('url');
    return (row?.url as string | undefined) ?? null;
  }

  /** Every registered runner, with what placement would make of it (`svc runners list`, diagnostics). */
  async list(): Promise<RunnerRow[]> {
    const rows = (await this.db.raw(
      `select r.runner_id, r.url, r.slots, r.live_sessions, r.load, r.state, r.started_at, r.heartbeat_at,
              extract(epoch from (now() - r.heartbeat_at)) as age_s,
              (r.state = 'ready' and r.heartbeat_at > now() - make_interval(secs => ?)) as placeable,
              (select count(*)::int from agent_sessions s where s.runner_id = r.runner_id and s.lease_expires_at > now()) as placed
         from session_runners r order by r.runner_id`,
      [this.staleSeconds],
    )).rows as Record<string, unknown>[];
    return rows.map((r) => ({
      runnerId: String(r.runner_id), url: String(r.url), slots: Number(r.slots), liveSessions: Number(r.live_sessions),
      placed: Number(r.placed), load: (typeof r.load === 'string' ? JSON.parse(r.load) : r.load) as Partial<RunnerLoad>, state: String(r.state),
      startedAt: new Date(r.started_at as string), heartbeatAt: new Date(r.heartbeat_at as string),
      heartbeatAgeSeconds: Number(r.age_s), placeable: Boolean(r.placeable),
    }));
  }

  // ---- runners ------------------------------------------------------------------------------

  /** Registers (or re-registers, same id after a restart) a runner, `starting`. */
  async register(runner: { readonly runnerId: string; readonly url: string; readonly slots: number }): Promise<void> {
    await this.db.raw(
      `insert into session_runners (runner_id, url, slots, live_sessions, load, state, started_at, heartbeat_at)
       values (?, ?, ?, 0, '{}', 'starting', now(), now())
       on conflict (runner_id) do update set url = excluded.url, slots = excluded.slots, live_sessions = 0, load = '{}',
         state = 'starting', started_at = now(), heartbeat_at = now()`,
      [runner.runnerId, runner.url, runner.slots],
    );
  }

  /** Renews a runner's row with its state and what it reports; re-inserts it if it was removed. */
  async heartbeat(runner: { readonly runnerId: string; readonly url: string; readonly slots: number; readonly state: RunnerState; readonly live: number; readonly load: RunnerLoad }): Promise<void> {
    await this.db.raw(
      `insert into session_runners (runner_id, url, slots, live_sessions, load, state, heartbeat_at)
       values (?, ?, ?, ?, ?::jsonb, ?, now())
       on conflict (runner_id) do update set live_sessions = excluded.live_sessions, load = excluded.load,
         state = excluded.state, slots = excluded.slots, heartbeat_at = now()`,
      [runner.runnerId, runner.url, runner.slots, runner.live, JSON.stringify(runner.load), runner.state],
    );
  }

  /** A runner's clean exit: its row goes (its sessions have ended). */
  async deregister(runnerId: string): Promise<void> {
    await this.db('session_runners').where('runner_id', runnerId).delete();
  }

  /**
   * A runner takes a session placed on it (`placed` -> `starting`, lease renewed), once; null
   * when it is not placed there (never was, moved, already claimed, ended or lapsed).
   */
  async claim(sessionId: string, runnerId: string): Promise<ClaimedSession | null> {
    const rows = (await this.db.raw(
      `update agent_sessions set status = 'starting', lease_expires_at = now() + make_interval(secs => ?)
        where session_id = ? and runner_id = ? and status = 'placed' and lease_expires_at > now()
        returning session_id, call_id, agent_id, organization_id, room, client_user_ref, applied_session_limit_seconds,
                  extract(epoch from (now() - started_at)) as age_s`,
      [this.leaseSeconds, sessionId, runnerId],
    )).rows as Record<string, unknown>[];
    const r = rows[0];
    if (!r) return null;
    return {
      sessionId: String(r.session_id), callId: String(r.call_id), agentId: String(r.agent_id), organizationId: String(r.organization_id),
      room: String(r.room), clientUserRef: (r.client_user_ref as string | null) ?? null,
      appliedLimitSeconds: Number(r.applied_session_limit_seconds), ageSeconds: Number(r.age_s ?? 0),
    };
  }

  /** Renews the leases of `sessionIds` held by `runnerId`; returns those still held and whether a release waits. */
  async renew(runnerId: string, sessionIds: readonly string[]): Promise<Map<string, { readonly releaseRequested: boolean }>> {
    if (sessionIds.length === 0) return new Map();
    const rows = await this.db('agent_sessions')
      .where('runner_id', runnerId)
      .whereIn('session_id', [...sessionIds])
      .update({ lease_expires_at: this.db.raw(`now() + make_interval(secs => ?)`, [this.leaseSeconds]) })
      .returning(['session_id', 'release_requested_at']);
    return new Map(rows.map((r: { session_id: string; release_requested_at: unknown }) => [r.session_id, { releaseRequested: r.release_requested_at != null }]));
  }
}
