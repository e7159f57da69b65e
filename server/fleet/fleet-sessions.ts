/**
 * The Session API of an API process in a fleet (`SVC_SESSIONS=fleet`, docs/deployment.md): it
 * admits and places, a runner runs. For one connect:
 *
 * 1. the same checks as a single process (agent, published, allowlist, connect token);
 * 2. one transaction: the agent's `max_concurrency`, then the ready runner with the most
 *    headroom under its load bound, its slot reserved by inserting the session on it
 *    (FleetStore.admitAndPlace); a runner this process found unreachable in the last
 *    FLEET.unreachableCooloffMs is chosen only when no other has room;
 * 3. the runner is asked over HTTP to start the bot (`FLEET.startTimeoutMs`, or
 *    `SVC_RUNNER_START_TIMEOUT_MS`); a runner that refuses or does not answer is skipped and the
 *    session moved to the next (FleetStore.movePlacement);
 * 4. the runner's `{room_url, token}` is the visitor's Session: the room is on the runner.
 *
 * From then on the session is the runner's: it renews the lease, picks up release requests and
 * writes the call record. This process only answers releases (recorded in the database, and the
 * runner nudged) and runs a reaper like every process, so a dead runner's calls end `runner_lost`
 * even while no other runner is alive.
 *
 * Refusals: 429 `concurrency_limit` as today; 503 `server_busy` when every ready runner is full
 * or no runner is ready but some are alive (starting, draining; nothing written), or when every
 * runner tried refused; 502 `orchestrator_error` when no runner has a fresh heartbeat, or none of
 * those tried answered, or the runner could not start the bot.
 */
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { Logger } from 'pino';
import type { FleetApiSettings } from '../config/server-config.ts';
import type { Db } from '../db/connect.ts';
import type { HttpHost } from '../http/http-app.ts';
import type { Agents } from '../services/agents.ts';
import type { ServiceCore } from '../services/open-services.ts';
import { mountSessionRoutes } from '../sessions/session-routes.ts';
import { connectableAgent, decidedConnect } from '../sessions/connect-front.ts';
import { newRoomName, SESSION_RETRY, type ConnectRequest, type LiveSessionStats, type SessionGrant } from '../sessions/live-sessions.ts';
import { SessionError } from '../sessions/session-errors.ts';
import { SESSION_LEASE, SessionStore } from '../sessions/session-store.ts';
import { FLEET, FleetStore, type AvoidedRunners, type RunnerTarget } from './fleet-store.ts';
import { nudgeRelease, requestStart } from './runner-protocol.ts';


export interface FleetSessionsOptions {
  readonly db: Db;
  readonly agents: Agents;
  readonly logger: Logger;
  readonly settings: FleetApiSettings;
  readonly lease?: { readonly leaseMs?: number; readonly reaperIntervalMs?: number };
  readonly runnerStaleMs?: number;
  readonly onDecision?: (ms: number, outcome: 'admitted' | 'refused') => void;
}

export class FleetSessions {
  readonly store: SessionStore;
  readonly fleet: FleetStore;
  private readonly log: Logger;
  private readonly timers: NodeJS.Timeout[] = [];
  private readonly inFlight = new Set<Promise<unknown>>();
  private closing = false;
  /** Runners this process found unreachable: the start time of the process that did not answer, and until when it is avoided (FLEET.unreachableCooloffMs). */
  private readonly unreachable = new Map<string, { readonly startedAt: string; readonly until: number }>();
  /** Malformed registry rows already logged (`runner id` + problem): logged once, not per connect. */
  private readonly badRowsLogged = new Set<string>();
  private readonly counts = { started: 0, refused: {} as Record<string, number>, ended: {} as Record<string, number>, placements: {} as Record<string, number>, skipped: {} as Record<string, number> };

  constructor(private readonly options: FleetSessionsOptions) {
    const leaseMs = options.lease?.leaseMs ?? SESSION_LEASE.leaseMs;
    // This process's name in the store is only used for the reaper's log; sessions carry their runner's.
    this.store = new SessionStore(options.db, `api:${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`, { leaseMs });
    this.log = options.logger.child({ component: 'fleet' });
    this.fleet = new FleetStore(options.db, {
      leaseMs,
      ...(options.runnerStaleMs ? { runnerStaleMs: options.runnerStaleMs } : {}),
      onBadRow: (runnerId, problem) => {
        const key = `${runnerId}\n${problem}`;
        if (this.badRowsLogged.has(key)) return;
        if (this.badRowsLogged.size > 1000) this.badRowsLogged.clear();
        this.badRowsLogged.add(key);
        this.log.error({ runnerId, problem }, 'malformed runner row skipped by placement (logged once)');
      },
    });
  }

  /** Starts the reaper (a dead runner's sessions end `runner_lost` whoever is alive). */
  start(): void {
    let running = false;
    const timer = setInterval(() => {
      if (running) return;
      running = true;
      this.store
        .reap()
        .then(async (reaped) => {
          for (const r of reaped) this.log.warn({ sessionId: r.sessionId, runnerId: r.runnerId }, 'session lease lapsed: call failed (runner_lost)');
          const forgotten = await this.fleet.forgetDead();
          if (forgotten.length) this.log.info({ runners: forgotten }, `dead runners' registry rows removed (no heartbeat for ${FLEET.forgetRunnerAfterMs / 60_000} min, no session left)`);
        })
        .catch((err) => this.log.warn({ err }, 'session reaper failed'))
        .finally(() => (running = false));
    }, this.options.lease?.reaperIntervalMs ?? SESSION_LEASE.reaperIntervalMs);
    timer.unref();
    this.timers.push(timer);
  }

  /** Counters for /metrics: `live` is 0 (the runners run the sessions); placements and skips by runner. */
  stats(): LiveSessionStats & { readonly placements: Readonly<Record<string, number>>; readonly skipped: Readonly<Record<string, number>> } {
    return { live: 0, started: this.counts.started, refused: { ...this.counts.refused }, ended: { ...this.counts.ended }, placements: { ...this.counts.placements }, skipped: { ...this.counts.skipped } };
  }

  hold(work: Promise<unknown>): void {
    const held = work.catch(() => undefined).finally(() => this.inFlight.delete(held));
    this.inFlight.add(held);
  }

  connect(request: ConnectRequest): Promise<SessionGrant> {
    return decidedConnect(this.counts, this.options.onDecision, (admitted) => this.admitAndPlace(request, admitted));
  }

  private async admitAndPlace(request: ConnectRequest, admitted: () => void): Promise<SessionGrant> {
    this.refuseWhenClosing();
    const row = await connectableAgent(this.options.agents, request);

    const admissionRequest = { agentId: row.agent_id as string, room: newRoomName(), roomProvider: 'embedded', clientUserRef: request.clientUserRef, origin: request.origin ?? null };
    const admission = await this.fleet.admitAndPlace(this.store, admissionRequest, this.avoided());
    if (!admission.admitted) {
      switch (admission.reason) {
        case 'agent_not_found':
          throw new SessionError('agent_not_found', `agent ${row.agent_id} not found`);
        case 'agent_unpublished':
          throw new SessionError('agent_unpublished', `agent ${row.agent_id} is not published`);
        case 'concurrency_limit':
          throw new SessionError('concurrency_limit', `agent ${row.agent_id} already has ${admission.live} of ${admission.limit} sessions`, admission.retryAfterSeconds);
        case 'server_busy':
          throw new SessionError('server_busy', 'every runner is full (or starting, or draining) right now', SESSION_RETRY.serverBusySeconds);
        case 'no_runner':
          if (admission.why === 'none') {
            this.log.error('no runner with a fresh heartbeat: sessions cannot be placed (is any `npm run runner` up?)');
            throw new SessionError('orchestrator_error', 'no runner is available to start the agent');
          }
          throw new SessionError('server_busy', 'every runner is full (or starting, or draining) right now', SESSION_RETRY.serverBusySeconds);
      }
    }
    admitted();
    const { sessionId, callId } = admission;
    const room = admissionRequest.room;
    const timeoutMs = this.options.settings.startTimeoutMs ?? FLEET.startTimeoutMs;
    const tried: string[] = [];
    let answered = false;
    if (!admission.placement) throw new SessionError('orchestrator_error', 'the session was admitted without a runner');
    let target: RunnerTarget = admission.placement.target;
    for (;;) {
      tried.push(target.runnerId);
      countByRunner(this.counts.placements, target.runnerId);
      const answer = await requestStart(target.url, this.options.settings.secret, sessionId, timeoutMs);
      if (answer.ok) {
        this.unreachable.delete(target.runnerId);
        this.log.info({ sessionId, runnerId: target.runnerId, room }, 'session placed and started');
        return { session_id: sessionId, room_url: answer.roomUrl, token: answer.token };
      }
      if (answer.kind === 'failed') {
        // The runner claimed it, could not start it, and recorded the call: its room could not be
        // created (room_creation_failed, as a single process answers it) or its bot not started.
        if (answer.code === 'room_creation_failed') throw new SessionError('room_creation_failed', 'the room could not be created');
        throw new SessionError('orchestrator_error', 'the agent could not be started');
      }
      countByRunner(this.counts.skipped, target.runnerId);
      if (answer.kind === 'refused') answered = true;
      else this.unreachable.set(target.runnerId, { startedAt: target.startedAt, until: Date.now() + FLEET.unreachableCooloffMs });
      this.log.warn({ sessionId, runnerId: target.runnerId, url: target.url, ...(answer.kind === 'refused' ? { refused: answer.code } : { unreachable: answer.detail, avoidedForMs: FLEET.unreachableCooloffMs }) }, 'runner skipped');
      const next = await this.fleet.movePlacement(sessionId, target.runnerId, tried, this.avoided()).catch((err) => {
        this.log.error({ err, sessionId }, 'could not move a placement');
        return { why: 'none' as const };
      });
      if (!('why' in next)) {
        target = next;
        continue;
      }
      const failureReason = answered ? 'no_runner' : 'runner_unreachable';
      // Recorded only while it still waits on its last runner; `not_placed`, or a finish that
      // finds it claimed: that runner took it after all (its answer lost or late), and it must
      // not run unseen.
      const ended = next.why !== 'not_placed' && await this.store
        .finish(sessionId, callId, { terminationReason: 'bot_start_failed', failureReason, participantCount: 0, metadata: { failure_detail: `runners tried: ${tried.length}; ${answered ? 'every one refused or could not be reached' : 'none answered'}` } }, { placedOn: target.runnerId })
        .catch((err) => {
          this.log.error({ err, sessionId }, 'could not record a session no runner started');
          return true;
        });
      if (!ended) {
        await this.store.requestRelease(room).catch(() => null);
        throw new SessionError('orchestrator_error', 'the agent could not be started');
      }
      if (answered) throw new SessionError('server_busy', 'every runner is full right now', SESSION_RETRY.serverBusySeconds);
      throw new SessionError('orchestrator_error', 'no runner could be reached to start the agent');
    }
  }

  /** The runners this process avoids now (they did not answer a start a moment ago). */
  private avoided(): AvoidedRunners {
    const now = Date.now();
    const avoided = new Map<string, string>();
    for (const [id, { startedAt, until }] of this.unreachable) {
      if (until <= now) this.unreachable.delete(id);
      else avoided.set(id, startedAt);
    }
    return avoided;
  }

  /** `POST /v1/public/agents/connect/{room}`: recorded in the database; the runner is nudged. */
  async release(room: string): Promise<number> {
    const released = await this.store.requestRelease(room);
    if (!released) return 0;
    if (released.runnerId) {
      const url = await this.fleet.runnerUrl(released.runnerId).catch(() => null);
      // Without an answer the runner's next heartbeat (FLEET.runnerHeartbeatMs) picks it up.
      if (url) void nudgeRelease(url, this.options.settings.secret, released.sessionId);
    }
    return 1;
  }

  private refuseWhenClosing(): void {
    if (this.closing) throw new SessionError('server_busy', 'this server is shutting down', SESSION_RETRY.serverBusySeconds);
  }

  /** New connects refused; the requests being served are answered (within `timeoutMs`); the reaper stops. Live sessions are the runners'. */
  async close(timeoutMs = 10_000): Promise<void> {
    this.closing = true;
    for (const timer of this.timers) clearInterval(timer);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.allSettled([...this.inFlight]), new Promise((resolve) => (timer = setTimeout(resolve, timeoutMs)))]);
    clearTimeout(timer);
  }
}

/** The Session API's routes on this process, answered by placement on the fleet's runners; the reaper started. */
export function mountFleetSessions(
  server: Pick<ServiceCore, 'db' | 'logger' | 'services'> & Pick<HttpHost, 'router' | 'api'>,
  settings: FleetApiSettings,
  options: Pick<FleetSessionsOptions, 'lease' | 'runnerStaleMs' | 'onDecision'> = {},
): FleetSessions {
  const sessions = new FleetSessions({ db: server.db, agents: server.services.agents, logger: server.logger, settings, ...options });
  mountSessionRoutes(server.api, server.router, sessions, server.logger);
  sessions.start();
  return sessions;
}

/**
 * Runners counted at most (`/metrics` series by runner): a runner's id changes with every restart
 * (host, pid, start), so a fleet that restarts or scales its runners would otherwise grow these
 * counters, and the series this API process exposes, for as long as it runs. The runner counted
 * least recently goes first.
 */
export const RUNNER_COUNTERS_KEPT = 256;

/** Counts one for `runnerId` in `counts`, keeping the `kept` runners counted most recently. */
export function countByRunner(counts: Record<string, number>, runnerId: string, kept: number = RUNNER_COUNTERS_KEPT): void {
  const n = (counts[runnerId] ?? 0) + 1;
  delete counts[runnerId]; // re-inserted last: the most recently counted
  counts[runnerId] = n;
  const ids = Object.keys(counts);
  for (let i = 0; i < ids.length - kept; i++) delete counts[ids[i]!];
}
