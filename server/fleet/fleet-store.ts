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
 *   each row checked (`checkRunnerRow`: a malformed one is skipped, never trusted), their placed
 *   sessions counted, and the session inserted (status `placed`) on the one with the most
 *   headroom among those under the load bound their runner reported: the most free slots, then
 *   the lowest load relative to its bound. Two API processes placing at once are serialised on the runner rows, so a
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
  /**
   * A runner that did not answer a start (no answer within the start timeout, refused
   * connection, unreachable host) is not chosen again by that API process for this long, unless
   * no other runner has room: only the first connect after a runner is cut off waits for it.
   */
  unreachableCooloffMs: 30_000,
  /** The release nudge to a runner (best effort; the runner's heartbeat picks the release up anyway). */
  releaseNudgeTimeoutMs: 1_000,
  /** SIGTERM on a runner: its live sessions get this long to end before they end `server_shutdown`. */
  drainTimeoutMs: 10 * 60_000,
  /**
   * A registry row whose heartbeat is older than this, with no session left on it (a runner that
   * died and never came back), is removed by the reapers of API processes and runners.
   */
  forgetRunnerAfterMs: 60 * 60_000,
  /**
   * The load bound a runner reports with its load (SVC_RUNNER_MAX_CPU_SHARE,
   * SVC_RUNNER_MAX_LATE_FRAME_SHARE, SVC_RUNNER_MAX_LOOP_LAG_MS): placement skips a runner whose
   * last reported load is over any of them. CPU share: the runner process's CPU time over its
   * load window, as a share of the machine's cores; late frames: the capacity gate's own bound
   * (FACE_CAPACITY.maxLateFrameShare; frames of sessions starting up are not judged); event-loop
   * lag (p99 over the window): only a stalled loop, since bot start-ups make it spike for a window
   * (measured: three starts at once on a loaded 2-core machine, p99 120-295 ms over the next 2-4 s,
   * while the live sessions' frames stayed on time), and a loop late enough to hurt the sessions
   * shows as late frames first.
   */
  loadBound: { cpu_share: 0.9, late_frame_share: 0.05, event_loop_lag_ms: 1000 },
} as const;

export type RunnerState = 'starting' | 'ready' | 'draining';

export interface RunnerLoad {
  readonly cpu_share: number;
  readonly late_frame_share: number;
  readonly event_loop_lag_ms: number;
}

/** The most load a runner takes new sessions under (each figure as in RunnerLoad). */
export type RunnerLoadBound = RunnerLoad;

/** What a runner writes in its row's `load`: what it measured, and its bound. */
export interface ReportedLoad extends RunnerLoad {
  readonly bound: RunnerLoadBound;
}

const LOAD_KEYS = ['cpu_share', 'late_frame_share', 'event_loop_lag_ms'] as const;

/** A registry row as placement reads it, checked: the row is written by another process, and a bad one is skipped, never trusted. */
export type CheckedRunner =
  | { readonly ok: true; readonly runnerId: string; readonly url: string; readonly slots: number; readonly load: RunnerLoad; readonly bound: RunnerLoadBound; readonly over: readonly (keyof RunnerLoad)[] }
  | { readonly ok: false; readonly runnerId: string; readonly problem: string };

/**
 * Checks a registry row (url, slots, load as written by its runner). A row that is not what a
 * runner of this code writes is `ok: false` with the reason: placement skips it.
 */
export function checkRunnerRow(row: { readonly runner_id: unknown; readonly url: unknown; readonly slots: unknown; readonly load: unknown }): CheckedRunner {
  const runnerId = String(row.runner_id);
  const bad = (problem: string): CheckedRunner => ({ ok: false, runnerId, problem });
  if (typeof row.url !== 'string') return bad(`its url is ${row.url === null ? 'null' : typeof row.url}`);
  let url: URL;
  try {
    url = new URL(row.url);
  } catch {
    return bad(`its url ${JSON.stringify(row.url.slice(0, 100))} is not a URL`);
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || !url.hostname) return bad(`its url ${JSON.stringify(row.url.slice(0, 100))} is not http(s)://host:port`);
  const slots = Number(row.slots);
  if (!Number.isSafeInteger(slots) || slots < 0) return bad(`its slots ${JSON.stringify(row.slots)} is not a whole number >= 0`);
  let load: unknown = row.load;
  if (typeof load === 'string') {
    try {
      load = JSON.parse(load);
    } catch {
      return bad('its load is not JSON');
    }
  }
  if (load === null || typeof load !== 'object' || Array.isArray(load)) return bad('its load is not an object');
  const figures = (from: Record<string, unknown>, fallback: RunnerLoad | null, what: string): RunnerLoad | string => {
    const out: Record<string, number> = {};
    for (const key of LOAD_KEYS) {
      const value = from[key];
      if (value === undefined && fallback) out[key] = fallback[key];
      else if (value === undefined) out[key] = 0; // a runner that has not measured yet (just registered)
      else if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) return `its ${what}.${key} ${JSON.stringify(value)} is not a number >= 0`;
      else out[key] = value;
    }
    return out as unknown as RunnerLoad;
  };
  const measured = figures(load as Record<string, unknown>, null, 'load');
  if (typeof measured === 'string') return bad(measured);
  const rawBound = (load as Record<string, unknown>).bound;
  if (rawBound !== undefined && (rawBound === null || typeof rawBound !== 'object' || Array.isArray(rawBound))) return bad('its load.bound is not an object');
  const bound = figures((rawBound ?? {}) as Record<string, unknown>, FLEET.loadBound, 'load.bound');
  if (typeof bound === 'string') return bad(bound);
  const over = LOAD_KEYS.filter((key) => measured[key] > bound[key]);
  return { ok: true, runnerId, url: url.origin, slots, load: measured, bound, over };
}

/**
 * The figures of a runner over its bound that placement holds against it. Late frames count only
 * while sessions are placed on it (as the capacity gate judges them only while it holds one): the
 * frames of sessions that have all ended starve nobody, and its window still has them for a while.
 */
export function overBound(runner: Extract<CheckedRunner, { ok: true }>, placed: number): readonly (keyof RunnerLoad)[] {
  return placed > 0 ? runner.over : runner.over.filter((key) => key !== 'late_frame_share');
}

/** How close a runner is to its bound: the largest of its figures over their bounds (0 idle, 1 at the bound). */
export function loadRatio(runner: { readonly load: RunnerLoad; readonly bound: RunnerLoadBound }): number {
  return Math.max(...LOAD_KEYS.map((key) => (runner.bound[key] > 0 ? runner.load[key] / runner.bound[key] : runner.load[key] > 0 ? Infinity : 0)));
}

export interface RunnerRow {
  readonly runnerId: string;
  readonly url: string;
  readonly slots: number;
  readonly liveSessions: number;
  /** Sessions placed on it with a live lease (what placement counts). */
  readonly placed: number;
  readonly load: Partial<RunnerLoad>;
  /** The load bound it reported (defaults for a runner that reported none). */
  readonly bound?: RunnerLoadBound;
  readonly state: string;
  readonly startedAt: Date;
  readonly heartbeatAt: Date;
  /** Seconds since its last heartbeat. */
  readonly heartbeatAgeSeconds: number;
  /** Ready, heartbeat fresh, a well-formed row, load under its bound: placement may choose it (when it has a free slot). */
  readonly placeable: boolean;
  /** Why placement may not choose it now. */
  readonly notPlaceable?: string;
}

export interface RunnerTarget {
  readonly runnerId: string;
  readonly url: string;
  /** When this runner process registered (the database's text of it): a runner restarted under the same id has another. */
  readonly startedAt: string;
}

/** Runners an API process avoids (they did not answer it a moment ago): id -> the `startedAt` of the process that did not answer. */
export type AvoidedRunners = ReadonlyMap<string, string>;

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
  /** The lease a claim or a renewal holds a session for. */
  readonly leaseMs: number;
  private readonly leaseSeconds: number;
  private readonly staleSeconds: number;
  private readonly onBadRow: ((runnerId: string, problem: string) => void) | undefined;

  constructor(
    private readonly db: Db,
    options: {
      readonly leaseMs: number;
      readonly runnerStaleMs?: number;
      /** A registry row placement skipped because it is malformed (called at every placement that meets it). */
      readonly onBadRow?: (runnerId: string, problem: string) => void;
    },
  ) {
    this.leaseSeconds = options.leaseMs / 1000;
    this.leaseMs = options.leaseMs;
    this.staleSeconds = (options.runnerStaleMs ?? FLEET.runnerStaleMs) / 1000;
    this.onBadRow = options.onBadRow;
  }

  // ---- API processes ------------------------------------------------------------------------

  /**
   * Admission and placement in one transaction: SessionStore's batched admission (the agent's row
   * lock, the published check, its live sessions against `max_concurrency`, the refusal's
   * retry_after) with this placement as its hook. Writes nothing unless admitted.
   */
  async admitAndPlace(sessions: SessionStore, request: AdmissionRequest, avoid: AvoidedRunners = new Map()): Promise<Admission<RunnerTarget>> {
    return sessions.admit<RunnerTarget>(request, {
      place: async (trx) => {
        const choice = await this.choose(trx, [], avoid);
        return 'why' in choice ? choice : { runnerId: choice.runnerId, target: choice };
      },
    });
  }

  /**
   * A runner refused the session or did not answer: moves it to the next best runner not in
   * `tried` (its slot reserved as at admission). `not_placed`: the session is no longer waiting
   * on `from` (that runner claimed it after all, or it ended); `full` / `none`: no runner left.
   */
  async movePlacement(sessionId: string, from: string, tried: readonly string[], avoid: AvoidedRunners = new Map()): Promise<RunnerTarget | { readonly why: 'full' | 'none' | 'not_placed' }> {
    return this.db.transaction(async (trx) => {
      const row = await trx('agent_sessions').where({ session_id: sessionId, runner_id: from, status: 'placed' }).forUpdate().first('call_id');
      if (!row) return { why: 'not_placed' } as const;
      const choice = await this.choose(trx, tried, avoid);
      if ('why' in choice) return choice;
      await trx('agent_sessions').where({ session_id: sessionId }).update({
        runner_id: choice.runnerId,
        // A fresh lease for the next runner: the admission's had been running through the start
        // deadline of the runner that did not answer, and a second such runner (or a deadline
        // over the lease) let the reaper end a session a healthy runner was about to take.
        lease_expires_at: trx.raw(`now() + make_interval(secs => ?)`, [this.leaseSeconds]),
        metadata: trx.raw(`metadata || ?::jsonb`, [JSON.stringify({ runner_id: choice.runnerId })]),
      });
      await trx('agent_calls').where({ call_id: row.call_id }).update({ metadata: trx.raw(`metadata || ?::jsonb`, [JSON.stringify({ runner_id: choice.runnerId })]) });
      return choice;
    });
  }

  /**
   * Inside a transaction: locks the ready runners with a fresh heartbeat (not in `exclude`) in id
   * order, checks each row (a malformed one is skipped: `onBadRow`), counts their placed
   * sessions, and returns the one with the most headroom among those under their load bound:
   * the most free slots, then the lowest load relative to its bound, then id order. Runners in
   * `avoid` (this process found them unreachable a moment ago) are chosen only when no other has
   * room.
   */
  private async choose(trx: Db, exclude: readonly string[], avoid: AvoidedRunners = new Map()): Promise<RunnerTarget | { readonly why: 'full' | 'none' }> {
    const rows = (await trx.raw(
      `select runner_id, url, slots, load, started_at::text as started
         from session_runners
        where state = 'ready' and heartbeat_at > now() - make_interval(secs => ?) and not (runner_id = any(?::text[]))
        order by runner_id
        for update`,
      [this.staleSeconds, [...exclude]],
    )).rows as { runner_id: string; url: unknown; slots: unknown; load: unknown; started: string }[];
    const started = new Map(rows.map((r) => [r.runner_id, r.started]));
    const runners: Extract<CheckedRunner, { ok: true }>[] = [];
    const bad: string[] = [];
    for (const row of rows) {
      const checked = checkRunnerRow(row);
      if (checked.ok) runners.push(checked);
      else {
        bad.push(checked.runnerId);
        this.onBadRow?.(checked.runnerId, checked.problem);
      }
    }
    if (runners.length === 0) {
      // Runners alive but starting or draining (a rolling deploy): busy, retry soon; none alive: none.
      const alive = (await trx.raw(`select count(*)::int as n from session_runners where heartbeat_at > now() - make_interval(secs => ?) and not (runner_id = any(?::text[]))`, [this.staleSeconds, [...exclude, ...bad]])).rows[0] as { n: number };
      return { why: Number(alive.n) > 0 ? 'full' : 'none' };
    }
    const counts = (await trx.raw(
      `select runner_id, count(*)::int as n from agent_sessions
        where runner_id = any(?::text[]) and lease_expires_at > now() group by runner_id`,
      [runners.map((r) => r.runnerId)],
    )).rows as { runner_id: string; n: number }[];
    const placed = new Map(counts.map((c) => [c.runner_id, Number(c.n)]));
    const open = runners
      .map((runner) => ({ runner, free: runner.slots - (placed.get(runner.runnerId) ?? 0), ratio: loadRatio(runner) }))
      .filter((c) => c.free > 0 && overBound(c.runner, placed.get(c.runner.runnerId) ?? 0).length === 0);
    const better = (a: (typeof open)[number], b: (typeof open)[number]) => a.free > b.free || (a.free === b.free && a.ratio < b.ratio);
    let best: (typeof open)[number] | null = null;
    // A runner restarted since it did not answer (another start time) is not avoided.
    const avoided = (c: (typeof open)[number]) => avoid.get(c.runner.runnerId) === started.get(c.runner.runnerId);
    for (const pass of [open.filter((c) => !avoided(c)), open]) {
      for (const c of pass) if (!best || better(c, best)) best = c;
      if (best) break;
    }
    return best ? { runnerId: best.runner.runnerId, url: best.runner.url, startedAt: started.get(best.runner.runnerId)! } : { why: 'full' };
  }

  /** The advertised URL of a runner (null: not registered). */
  /** The runner's origin as placement checks it (`checkRunnerRow`: http(s)://host:port, nothing more), or null. */
  async runnerUrl(runnerId: string): Promise<string | null> {
    const row = await this.db('session_runners').where('runner_id', runnerId).first('url');
    if (typeof row?.url !== 'string') return null;
    try {
      const url = new URL(row.url);
      return (url.protocol === 'http:' || url.protocol === 'https:') && url.hostname ? url.origin : null;
    } catch {
      return null;
    }
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
    return rows.map((r) => {
      const checked = checkRunnerRow(r as { runner_id: unknown; url: unknown; slots: unknown; load: unknown });
      const fresh = Boolean(r.placeable);
      const notPlaceable = !checked.ok ? `malformed row: ${checked.problem}`
        : !fresh ? (String(r.state) === 'ready' ? 'heartbeat stale' : `state ${String(r.state)}`)
        : overBound(checked, Number(r.placed)).length ? `load over its bound (${overBound(checked, Number(r.placed)).map((k) => `${k} ${checked.load[k]} > ${checked.bound[k]}`).join(', ')})`
        : null;
      return {
        runnerId: String(r.runner_id), url: String(r.url), slots: Number(r.slots), liveSessions: Number(r.live_sessions),
        placed: Number(r.placed), load: checked.ok ? checked.load : {}, ...(checked.ok ? { bound: checked.bound } : {}), state: String(r.state),
        startedAt: new Date(r.started_at as string), heartbeatAt: new Date(r.heartbeat_at as string),
        heartbeatAgeSeconds: Number(r.age_s), placeable: notPlaceable === null, ...(notPlaceable ? { notPlaceable } : {}),
      };
    });
  }

  /**
   * Removes the rows of runners whose heartbeat is older than `forgetAfterMs` and that have no
   * session left (a runner that died and never came back; its sessions were reaped). Returns their ids.
   */
  async forgetDead(forgetAfterMs: number = FLEET.forgetRunnerAfterMs): Promise<string[]> {
    const rows = (await this.db.raw(
      `delete from session_runners r
        where r.heartbeat_at < now() - make_interval(secs => ?)
          and not exists (select 1 from agent_sessions s where s.runner_id = r.runner_id)
        returning r.runner_id`,
      [forgetAfterMs / 1000],
    )).rows as { runner_id: string }[];
    return rows.map((r) => r.runner_id);
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
  async heartbeat(runner: { readonly runnerId: string; readonly url: string; readonly slots: number; readonly state: RunnerState; readonly live: number; readonly load: ReportedLoad }): Promise<void> {
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
   * when it is not placed there (never was, moved, already claimed, ended or lapsed). The session
   * and its call record the runner's room provider (`embedded`, `livekit`): the API process that
   * placed it does not know which rooms the runner makes.
   */
  async claim(sessionId: string, runnerId: string, roomProvider: string): Promise<ClaimedSession | null> {
    const rows = (await this.db.raw(
      `with claimed as (
         update agent_sessions set status = 'starting', room_provider = ?, lease_expires_at = now() + make_interval(secs => ?)
          where session_id = ? and runner_id = ? and status = 'placed' and lease_expires_at > now()
          returning session_id, call_id, agent_id, organization_id, room, client_user_ref, applied_session_limit_seconds,
                    extract(epoch from (now() - started_at)) as age_s
       ), call as (
         update agent_calls set metadata = metadata || jsonb_build_object('room_provider', ?::text)
          where call_id = (select call_id from claimed)
       )
       select * from claimed`,
      [roomProvider, this.leaseSeconds, sessionId, runnerId, roomProvider],
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
