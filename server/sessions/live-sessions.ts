/**
 * The Session API's engine: admits a visitor's session, creates its room, starts its bot through
 * the `SessionRunner` (agent/), keeps its lease alive, releases it, and writes how it ended. The
 * routes (session-routes.ts) only parse and shape; the database rules live in SessionStore; what
 * a bot does lives in the runner. Every ending path (release, the bot ending, a start failure,
 * shutdown, a lost lease) goes through `finish`, once, so the slot is freed, the room closed and
 * the call recorded whatever happened.
 */
import { hostname } from 'node:os';
import { randomBytes, randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { ProviderStartError, type AgentRuntimeRecord } from '../../agent/agent-pipeline.ts';
import { startWithin } from './start-deadline.ts';
import { SESSION_TIMEOUTS, type RunningSession, type SessionOutcome, type SessionRunner, type TerminationReason } from '../../agent/session-contract.ts';
import type { AvatarRoom, RoomProvider } from '../../transports/webrtc/room-provider.ts';
import type { Db } from '../db/connect.ts';
import type { Agents } from '../services/agents.ts';
import { withoutPaths } from './agent-face.ts';
import { connectableAgent, decidedConnect } from './connect-front.ts';
import { endSession, LEASE_WATCH_INTERVAL_MS, overdueLeases } from './session-ending.ts';
import { SessionError } from './session-errors.ts';
import { SESSION_LEASE, SessionStore, type Admission } from './session-store.ts';
import { PendingDecisions, SESSION_START, StartPacer } from './start-pacing.ts';

export { PendingDecisions, SESSION_START } from './start-pacing.ts';

type ConcurrencyRefusal = Extract<Admission, { reason: 'concurrency_limit' }>;

/** A process-wide capacity gate (server/capacity): one lease per running bot. */
export interface BotCapacity {
  tryAcquire(): { release(): void } | null;
  /** Why `tryAcquire` would refuse now (null: it would admit); takes and counts nothing. */
  wouldRefuse(): 'full' | 'late_frames' | null;
  /** Counts a refusal decided from `wouldRefuse`. */
  recordRefusal(reason: 'full' | 'late_frames'): void;
  /** A bot starts: frames are not judged until the returned function is called and the start has settled. */
  startingUp?(): () => void;
}

export interface LiveSessionsOptions {
  readonly db: Db;
  readonly agents: Agents;
  readonly rooms: RoomProvider;
  readonly runner: SessionRunner;
  readonly logger: Logger;
  readonly capacity?: BotCapacity;
  /** Lease timings (tests shorten them); defaults SESSION_LEASE. */
  readonly lease?: { readonly leaseMs?: number; readonly heartbeatMs?: number; readonly reaperIntervalMs?: number };
  /** This process's name in `agent_sessions.runner_id`; default host:pid:random. */
  readonly runnerId?: string;
  /** How long shutdown waits for sessions to end before giving up on them (their leases lapse). */
  readonly shutdownTimeoutMs?: number;
  /** How long a bot's start may take (default SESSION_TIMEOUTS.startTimeoutMs; tests shorten it). */
  readonly startTimeoutMs?: number;
  /**
   * Called once per connect when admission has decided (the request's arrival to admitted, or to
   * refused by any rule), with how long that took: the metric `svc_session_admission_decision_seconds`.
   */
  readonly onDecision?: (ms: number, outcome: 'admitted' | 'refused') => void;
}

export interface ConnectRequest {
  readonly agentId: string;
  readonly clientUserRef: string | null;
  readonly origin: string | undefined;
  readonly authToken: unknown;
  /** `{base_url}` as the caller reached the service (the room URL points at the same host). */
  readonly baseUrl?: string;
}

export interface SessionGrant {
  readonly session_id: string;
  readonly room_url: string;
  readonly token: string;
}

interface LocalSession {
  readonly sessionId: string;
  readonly agentId: string;
  readonly callId: string;
  readonly room: AvatarRoom;
  readonly capacity: { release(): void } | null;
  running: RunningSession | null;
  finished: Promise<void> | null;
  /** The server's own bound on the session (see `boundSession`). */
  limitTimer?: NodeJS.Timeout;
  /**
   * Until when (this process's monotonic clock, ms) its lease is known to hold: the admission's
   * or the last renewal's start plus the lease. Past it, the session may have been reaped and its
   * slot given to another (see `watchLeases`).
   */
  heldUntil: number;
  leaseLost?: boolean;
}

/** What `LiveSessions.stats()` reports (server/metrics turns it into Prometheus series). */
export interface LiveSessionStats {
  /** Sessions this process runs now. */
  readonly live: number;
  /** Connect requests that got a session (since start). */
  readonly started: number;
  /** Connect requests that got an error, by its `error_code` (`internal_error`: anything unexpected). */
  readonly refused: Readonly<Record<string, number>>;
  /** Sessions of this process that ended, by `termination_reason`. */
  readonly ended: Readonly<Record<string, number>>;
}

export const SESSION_RETRY = {
  /** `retry_after_seconds` of `server_busy`: load changes quickly; a queueing widget checks again soon. */
  serverBusySeconds: 5,
} as const;

/** Room names carry 192 random bits: knowing one is enough to end its session. */
export function newRoomName(): string {
  return `s_${randomBytes(24).toString('base64url')}`;
}

export class LiveSessions {
  readonly store: SessionStore;
  private readonly local = new Map<string, LocalSession>();
  private readonly byRoom = new Map<string, string>();
  /** Sessions this process handles (admitted here, until their end was recorded or given up on): the heartbeat renews these, and only these. */
  private readonly handled = new Set<string>();
  private readonly timers: NodeJS.Timeout[] = [];
  /** The lease every admission and renewal holds (`SESSION_LEASE.leaseMs` unless the options shorten it). */
  private get leaseMs(): number {
    return this.options.lease?.leaseMs ?? SESSION_LEASE.leaseMs;
  }
  private closing = false;
  /** Session requests being served (body, admission, response): shutdown waits for them. */
  private readonly inFlight = new Set<Promise<unknown>>();
  private readonly log: Logger;
  private readonly counts = { started: 0, refused: {} as Record<string, number>, ended: {} as Record<string, number> };
  private readonly decisions = new PendingDecisions();
  /** Agent lookups in flight: a burst of connects for one agent reads its row once (the admission transaction re-checks it under lock). */
  private readonly lookups = new Map<string, ReturnType<LiveSessionsOptions['agents']['findById']>>();
  private readonly starts = new StartPacer(SESSION_START.concurrentStarts, this.decisions);

  constructor(private readonly options: LiveSessionsOptions) {
    this.store = new SessionStore(options.db, options.runnerId ?? `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`, options.lease);
    this.log = options.logger.child({ component: 'sessions' });
  }

  /** Starts the heartbeat and the reaper. */
  start(): void {
    const every = (ms: number, task: () => Promise<void>, what: string) => {
      let running = false;
      const timer = setInterval(() => {
        if (running) return;
        running = true;
        task().catch((err) => this.log.warn({ err }, `${what} failed`)).finally(() => (running = false));
      }, ms);
      timer.unref();
      this.timers.push(timer);
    };
    every(this.options.lease?.heartbeatMs ?? SESSION_LEASE.heartbeatMs, () => this.heartbeat(), 'session heartbeat');
    const watch = setInterval(() => this.watchLeases(), LEASE_WATCH_INTERVAL_MS);
    watch.unref();
    this.timers.push(watch);
    every(this.options.lease?.reaperIntervalMs ?? SESSION_LEASE.reaperIntervalMs, () => this.reap().then(() => undefined), 'session reaper');
    // The first burst does not pay for compiling the admission's code paths and queries.
    void this.store
      .warmUp()
      .then(() => this.options.agents.findById('00000000-0000-4000-8000-000000000000'))
      .catch((err) => this.log.warn({ err }, 'admission warm-up failed'));
  }

  get size(): number {
    return this.local.size;
  }

  /** Counters for metrics; reading them changes nothing. */
  stats(): LiveSessionStats {
    return { live: this.local.size, started: this.counts.started, refused: { ...this.counts.refused }, ended: { ...this.counts.ended } };
  }

  /**
   * Shutdown (`close`) waits for `work` (bounded by its timeout) before it ends the live sessions
   * and the server closes its connections: a request being served is answered, not reset. The
   * routes hold each request until its response is written.
   */
  hold(work: Promise<unknown>): void {
    const held = work.catch(() => undefined).finally(() => this.inFlight.delete(held));
    this.inFlight.add(held);
  }

  connect(request: ConnectRequest): Promise<SessionGrant> {
    return decidedConnect(this.counts, this.options.onDecision, (admitted) => this.admitAndStart(request, admitted), this.decisions.begin());
  }

  private agentRow(agentId: string): ReturnType<LiveSessionsOptions['agents']['findById']> {
    let lookup = this.lookups.get(agentId);
    if (!lookup) {
      lookup = this.options.agents.findById(agentId);
      this.lookups.set(agentId, lookup);
      const forget = () => {
        if (this.lookups.get(agentId) === lookup) this.lookups.delete(agentId);
      };
      lookup.then(forget, forget);
    }
    return lookup;
  }

  private async admitAndStart(request: ConnectRequest, admitted: () => void): Promise<SessionGrant> {
    this.refuseWhenClosing();
    const row = await connectableAgent(this.options.agents, request, (id) => this.agentRow(id), () => this.refuseWhenClosing());

    // Taken inside the admission transaction, after the agent's own limit passed.
    const held: { lease: { release(): void } | null } = { lease: null };
    const gate = this.options.capacity;
    const reserve = gate ? () => (held.lease = gate.tryAcquire()) !== null : undefined;
    const roomName = newRoomName();
    const atLimit = (refusal: ConcurrencyRefusal) => new SessionError('concurrency_limit', `agent ${row.agent_id} already has ${refusal.live} of ${refusal.limit} sessions`, refusal.retryAfterSeconds);
    // This process cannot take a bot now (every slot taken, or its live bots' frames late): decided
    // in the same batch, after the agent's limit, so the visitor learns which limit stops them.
    // (An unlocked read of the limit before the batch raced with the batch's own uncommitted
    // admissions: connects at the agent's limit were answered server_busy.)
    let admission;
    const admittingAt = performance.now();
    try {
      admission = await this.store.admit({ agentId: row.agent_id, room: roomName, roomProvider: this.options.rooms.name, clientUserRef: request.clientUserRef, origin: request.origin ?? null }, reserve);
    } catch (err) {
      held.lease?.release();
      throw err;
    }
    if (!admission.admitted) {
      held.lease?.release();
      if (admission.reason === 'concurrency_limit') throw atLimit(admission);
      // (no_runner: only when placing on a fleet, which this process does not.)
      if (admission.reason === 'server_busy' || admission.reason === 'no_runner') throw new SessionError('server_busy', 'this server has no capacity for another session right now', SESSION_RETRY.serverBusySeconds);
      throw new SessionError(admission.reason, admission.reason === 'agent_not_found' ? `agent ${row.agent_id} not found` : `agent ${row.agent_id} is not published`);
    }
    const { sessionId, callId } = admission;
    this.handled.add(sessionId);
    admitted();
    const admittedAt = Date.now();
    // Decisions first: the rest of a burst is decided before this start-up (its room, its agent's
    // configuration, then its bot through the pacer) takes the event loop.
    await this.decisions.quiet(SESSION_START.maxDecisionsFirstMs);
    // Shutdown began while the database admitted it: rolled back, recorded, and refused.
    if (this.closing) {
      held.lease?.release();
      await this.endBeforeRoom(sessionId, callId, { terminationReason: 'server_shutdown', failureReason: null, participantCount: 0, metadata: {} });
      this.refuseWhenClosing();
    }

    let room: AvatarRoom;
    try {
      room = await this.options.rooms.createRoom({
        name: roomName,
        ...(request.baseUrl ? { baseUrl: request.baseUrl } : {}),
        // TURN credentials last as long as the session can (its limit, the farewell and the stop),
        // and so does the visitor's room token: a page whose network changed joins again with it.
        mediaTtlMs: admission.appliedLimitSeconds * 1000 + SESSION_TIMEOUTS.limitFarewellMs + SESSION_TIMEOUTS.stopTimeoutMs,
        tokenTtlMs: admission.appliedLimitSeconds * 1000 + SESSION_TIMEOUTS.limitFarewellMs + SESSION_TIMEOUTS.stopTimeoutMs,
      });
    } catch (err) {
      this.log.warn({ err, sessionId }, 'room creation failed');
      held.lease?.release();
      await this.endBeforeRoom(sessionId, callId, { terminationReason: 'room_creation_failed', failureReason: 'room_creation_failed', participantCount: 0, metadata: { failure_detail: (err as Error).message } });
      throw new SessionError('room_creation_failed', 'the WebRTC room could not be created');
    }
    const local: LocalSession = { sessionId, agentId: row.agent_id, callId, room, capacity: held.lease, running: null, finished: null, heldUntil: admittingAt + this.leaseMs };
    this.local.set(sessionId, local);
    this.byRoom.set(room.room, sessionId);
    if (this.closing) {
      await this.finish(local, { terminationReason: 'server_shutdown', failureDetail: null, participantCount: 0, metadata: {} });
      this.refuseWhenClosing();
    }

    let agent: AgentRuntimeRecord;
    try {
      const principal = { organizationId: admission.organizationId, apiKeyId: 'session', createdBy: 'session' };
      agent = await this.options.agents.get(principal, row.agent_id);
      // A third_party agent's provider key is decrypted here, for this session's provider only.
      const stsApiKey = agent.mode === 'third_party' ? (await this.options.agents.providerKey(principal, row.agent_id)).apiKey : null;
      local.running = await this.starts.run(async () => {
        // The start-up's late frames (its own first ones, its neighbours' meanwhile) are not held against the process.
        const started = this.options.capacity?.startingUp?.();
        try {
          return await startWithin(
            this.options.runner.start({ sessionId, callId, agent, clientUserRef: request.clientUserRef, room, stsApiKey }),
            this.options.startTimeoutMs ?? SESSION_TIMEOUTS.startTimeoutMs,
            (err) => this.log.warn({ err, sessionId }, 'a bot start given up on ended late'),
          );
        } finally {
          started?.();
        }
      });
    } catch (err) {
      this.log.error({ err, sessionId }, 'bot start failed');
      // A failure that knows its reason records it (`tts_key_missing` from a provider that cannot
      // start, `face_unavailable`, ...); the visitor gets orchestrator_error either way.
      const known = err instanceof ProviderStartError ? err.code : (err as { failureCode?: unknown })?.failureCode;
      const failureCode = typeof known === 'string' ? known : undefined;
      await this.finish(local, { terminationReason: 'bot_start_failed', failureDetail: withoutPaths((err as Error).message), ...(failureCode ? { failureCode } : {}), participantCount: 0, metadata: {} });
      throw new SessionError('orchestrator_error', 'the agent could not be started');
    }
    if (this.closing) {
      await this.stop(local, 'server_shutdown');
      this.refuseWhenClosing();
    }
    this.boundSession(local, admission.appliedLimitSeconds * 1000 - (Date.now() - admittedAt));
    await this.store.markActive(sessionId, (err, willRetry) => this.log.warn({ err, sessionId, willRetry }, 'could not mark the session active'));
    void local.running.ended.then(
      (outcome) => this.finish(local, outcome),
      (err) => this.finish(local, { terminationReason: 'pipeline_error', failureDetail: (err as Error)?.message ?? String(err), participantCount: 0, metadata: {} }),
    );
    this.log.info({ sessionId, agentId: row.agent_id, room: room.room }, 'session started');
    return { session_id: sessionId, room_url: room.roomUrl, token: room.subscriberToken };
  }

  /**
   * The bot ends its session at `session_limit_seconds` from admission (SESSION_TIMEOUTS); this
   * process stops it itself once the bot's farewell allowance and stop time have passed too, so a
   * session is bounded whatever state its bot is in.
   */
  private boundSession(local: LocalSession, remainingMs: number): void {
    const ms = Math.max(0, remainingMs) + SESSION_TIMEOUTS.limitFarewellMs + SESSION_TIMEOUTS.stopTimeoutMs;
    local.limitTimer = setTimeout(() => {
      this.log.warn({ sessionId: local.sessionId }, 'session still running past its limit: stopped by the server');
      void this.stop(local, 'session_limit_reached');
    }, ms);
    local.limitTimer.unref();
  }

  /** `POST /v1/public/agents/connect/{room}`: how many sessions this call released (0 or 1). */
  async release(room: string): Promise<number> {
    const released = await this.store.requestRelease(room);
    if (!released) return 0;
    const local = this.local.get(released.sessionId);
    // Held by another process: its heartbeat picks the request up (within heartbeatMs).
    if (local) void this.stop(local, 'client_released');
    return 1;
  }

  private refuseWhenClosing(): void {
    if (this.closing) throw new SessionError('server_busy', 'this server is shutting down', SESSION_RETRY.serverBusySeconds);
  }

  /**
   * Ends every session of this process (SIGTERM) and stops the timers. In order: new connects are
   * refused (`server_busy`); the requests being served finish, an admission in flight rolled back
   * (its call recorded `server_shutdown`, answered 503 `server_busy`); then the live sessions end.
   * All of it within `shutdownTimeoutMs`.
   */
  async close(reason: TerminationReason = 'server_shutdown'): Promise<void> {
    this.closing = true;
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise((resolve) => (timer = setTimeout(resolve, this.options.shutdownTimeoutMs ?? 10_000)));
    await Promise.race([Promise.allSettled([...this.inFlight]), deadline]);
    const endings = [...this.local.values()].map((s) => this.stop(s, reason));
    await Promise.race([Promise.allSettled(endings), deadline]);
    clearTimeout(timer);
    // The heartbeat runs until the sessions ended (as RunnerSessions.close does): stopped first, the
    // leases of sessions still saying goodbye lapsed 10-15 s into a longer grace, and another
    // process reaped them as runner_lost and freed their slots while their bots still ran.
    for (const t of this.timers) clearInterval(t);
    this.store.close();
  }

  private async stop(local: LocalSession, reason: TerminationReason): Promise<void> {
    if (!local.running) return local.finished ?? undefined;
    const outcome = await local.running.stop(reason).catch((err): SessionOutcome => ({ terminationReason: 'pipeline_error', failureDetail: (err as Error).message, participantCount: 0, metadata: {} }));
    await this.finish(local, outcome);
  }

  private finish(local: LocalSession, outcome: SessionOutcome): Promise<void> {
    clearTimeout(local.limitTimer);
    local.finished ??= (async () => {
      this.counts.ended[outcome.terminationReason] = (this.counts.ended[outcome.terminationReason] ?? 0) + 1;
      await endSession({ rooms: this.options.rooms, store: this.store, log: this.log }, local, outcome);
      // Not renewed any more: when its end could not be recorded, its lease lapses and a reaper
      // ends the call and frees the agent's slot.
      this.handled.delete(local.sessionId);
      this.local.delete(local.sessionId);
      this.byRoom.delete(local.room.room);
      this.log.info({ sessionId: local.sessionId, reason: outcome.terminationReason }, 'session ended');
    })();
    return local.finished;
  }

  /**
   * Records the end of a session that never got its room. A failure to record it is logged, not
   * thrown (the visitor's answer stays the refusal it is), and the session is no longer renewed:
   * its lease lapses and a reaper ends the call.
   */
  private async endBeforeRoom(sessionId: string, callId: string, end: Parameters<SessionStore['finish']>[2]): Promise<void> {
    try {
      await this.store.finish(sessionId, callId, end);
    } catch (err) {
      this.log.error({ err, sessionId }, 'could not record the end of a session; its lease lapses and a reaper ends the call');
    } finally {
      this.handled.delete(sessionId);
    }
  }

  private async heartbeat(): Promise<void> {
    if (this.handled.size === 0) return;
    const beatAt = performance.now();
    const held = await this.store.heartbeat([...this.handled]);
    for (const local of [...this.local.values()]) {
      const row = held.get(local.sessionId);
      if (row) local.heldUntil = Math.max(local.heldUntil, beatAt + this.leaseMs);
      if (!local.running || local.finished) continue;
      // Our row is gone: a reaper took the session while this process stalled. Stop the bot.
      if (!row) void this.stop(local, 'runner_lost');
      else if (row.releaseRequested) void this.stop(local, 'client_released');
    }
  }

  /**
   * Sessions whose lease this process could not renew in time (the database unreachable or
   * stalled, while visitors still reach this process) are stopped `runner_lost`: another process's
   * reaper ends their calls and frees their slots once the lease lapsed, and new sessions are then
   * admitted in their place, so a bot still talking here would run past its agent's limit. Checked
   * on its own timer: a heartbeat stuck on a dead connection does not check anything.
   */
  private watchLeases(): void {
    const now = performance.now();
    for (const local of overdueLeases(this.local.values(), now)) {
      this.log.error({ sessionId: local.sessionId, overdueMs: Math.round(now - local.heldUntil) }, 'session lease not renewed in time (database unreachable?): bot stopped (runner_lost)');
      void this.stop(local, 'runner_lost');
    }
  }

  private async reap(): Promise<number> {
    const reaped = await this.store.reap();
    for (const r of reaped) {
      this.log.warn({ sessionId: r.sessionId, runnerId: r.runnerId }, 'session lease lapsed: call failed (runner_lost)');
      const local = this.local.get(r.sessionId);
      if (local && local.running && !local.finished) void this.stop(local, 'runner_lost');
    }
    return reaped.length;
  }
}
