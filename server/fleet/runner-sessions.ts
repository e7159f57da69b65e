/**
 * The sessions of one runner (`npm run runner`, docs/deployment.md). An API process admitted and
 * placed each of them (FleetSessions); this process claims it, makes its room in its own embedded
 * room registry (the visitor's `room_url` is this runner's signalling, `SVC_RUNNER_PUBLIC_URL`),
 * starts its bot with the BotRunner (agent/), and from then on owns it as a single server process
 * owns its sessions (server/sessions/live-sessions.ts): it renews the lease, picks up release
 * requests, bounds the session by its limit, and writes how it ended (SessionStore.finish).
 *
 * It also keeps the runner's registry row (FleetStore): `starting` until its engines are warm,
 * `ready`, then `draining` from SIGTERM on, with its live sessions and load every heartbeat.
 */
import type { Logger } from 'pino';
import { ProviderStartError, type AgentRuntimeRecord } from '../../agent/agent-pipeline.ts';
import { SESSION_TIMEOUTS, type RunningSession, type SessionOutcome, type SessionRunner, type TerminationReason } from '../../agent/session-contract.ts';
import { endSession, LEASE_WATCH_INTERVAL_MS, overdueLeases } from '../sessions/session-ending.ts';
import { startWithin } from '../sessions/start-deadline.ts';
import type { AvatarRoom, RoomProvider } from '../../transports/webrtc/room-provider.ts';
import type { CapacityGate } from '../capacity/capacity-gate.ts';
import type { Agents } from '../services/agents.ts';
import { withoutPaths } from '../sessions/agent-face.ts';
import type { LiveSessionStats } from '../sessions/live-sessions.ts';
import { SESSION_LEASE, SessionStore } from '../sessions/session-store.ts';
import { FLEET, type FleetStore, type ReportedLoad, type RunnerLoadBound, type RunnerState } from './fleet-store.ts';
import type { RunnerRefusalCode } from './runner-protocol.ts';

/** A start this runner will not take (503 / 409): the API process tries the next runner. */
export class RunnerRefusal extends Error {
  constructor(
    readonly code: RunnerRefusalCode,
    readonly status: 503 | 409,
    message: string,
  ) {
    super(message);
  }
}

/** A session this runner claimed and could not start (502): the call is recorded `bot_start_failed`. */
export class RunnerStartFailure extends Error {
  constructor(
    message: string,
    /** What the visitor is told: the room could not be created, or the bot could not start. */
    readonly code: 'bot_start_failed' | 'room_creation_failed' = 'bot_start_failed',
  ) {
    super(message);
  }
}

export interface RunnerIdentity {
  readonly runnerId: string;
  /** Advertised: where API processes and visitors reach this runner. */
  readonly url: string;
  readonly slots: number;
}

export interface RunnerSessionsOptions {
  readonly identity: RunnerIdentity;
  readonly store: SessionStore;
  readonly fleet: FleetStore;
  readonly agents: Agents;
  readonly rooms: RoomProvider;
  readonly runner: SessionRunner;
  /** Slots (`identity.slots`) and the load (late frames) judged by the same gate as a single process's. */
  readonly capacity: CapacityGate;
  readonly logger: Logger;
  readonly lease?: { readonly reaperIntervalMs?: number };
  readonly heartbeatMs?: number;
  /** Reported with its load every heartbeat: placement skips this runner while its load is over it (default FLEET.loadBound). */
  readonly loadBound?: RunnerLoadBound;
  /** How long a bot's start may take (default SESSION_TIMEOUTS.startTimeoutMs). */
  readonly startTimeoutMs?: number;
}

/** What a runner counts for its /metrics (runner-metrics.ts). */
export interface RunnerStats {
  readonly state: RunnerState;
  readonly slots: number;
  readonly live: number;
  /** Starts this runner took (a session placed here whose bot it started). */
  readonly placements: number;
  /** Starts it refused, by code (runner_full, runner_draining, runner_starting, not_placed_here). */
  readonly refused: Readonly<Record<string, number>>;
  /** Sessions it claimed and could not start (bot_start_failed, room_creation_failed). */
  readonly startFailures: number;
  /** Drains begun (SIGTERM): 0 or 1 in a runner's life. */
  readonly drains: number;
  /** Sessions ended, by termination_reason. */
  readonly ended: Readonly<Record<string, number>>;
  /** What the last heartbeat reported. */
  readonly load: ReportedLoad | null;
}

interface RunnerSession {
  readonly sessionId: string;
  readonly callId: string;
  readonly room: AvatarRoom;
  readonly capacity: { release(): void };
  running: RunningSession | null;
  finished: Promise<void> | null;
  limitTimer?: NodeJS.Timeout;
  /**
   * Until when its lease holds, on this process's monotonic clock (the claim's or the last
   * renewal's start plus the lease): past it, the bot is stopped `runner_lost` (`watchLeases`).
   */
  heldUntil: number;
  leaseLost?: boolean;
}

export class RunnerSessions {
  private stateNow: RunnerState = 'starting';
  private readonly local = new Map<string, RunnerSession>();
  private readonly timers: NodeJS.Timeout[] = [];
  private readonly log: Logger;
  private readonly emptied: (() => void)[] = [];
  private readonly counts = { started: 0, refused: {} as Record<string, number>, ended: {} as Record<string, number>, startFailures: 0, drains: 0 };
  private lastLoad: ReportedLoad | null = null;
  private beating: Promise<void> | null = null;
  /** Starts accepted and not yet settled: a shutdown waits for them (bounded) before it ends what runs. */
  private readonly starting = new Set<Promise<unknown>>();
  /** `close()` began: no heartbeat writes the registry row again. */
  private closed = false;

  constructor(private readonly options: RunnerSessionsOptions) {
    this.log = options.logger.child({ component: 'runner', runnerId: options.identity.runnerId });
  }

  get state(): RunnerState {
    return this.stateNow;
  }

  get size(): number {
    return this.local.size;
  }

  stats(): LiveSessionStats {
    return { live: this.local.size, started: this.counts.started, refused: { ...this.counts.refused }, ended: { ...this.counts.ended } };
  }

  runnerStats(): RunnerStats {
    return {
      state: this.stateNow, slots: this.options.identity.slots, live: this.local.size, placements: this.counts.started,
      refused: { ...this.counts.refused }, startFailures: this.counts.startFailures, drains: this.counts.drains, ended: { ...this.counts.ended }, load: this.lastLoad,
    };
  }

  /** Registers the runner (`starting`) and starts its heartbeat and reaper. */
  async register(): Promise<void> {
    await this.options.fleet.register(this.options.identity);
    const every = (ms: number, task: () => Promise<unknown>, what: string) => {
      let running = false;
      const timer = setInterval(() => {
        if (running) return;
        running = true;
        task().catch((err) => this.log.warn({ err }, `${what} failed`)).finally(() => (running = false));
      }, ms);
      timer.unref();
      this.timers.push(timer);
    };
    every(this.options.heartbeatMs ?? FLEET.runnerHeartbeatMs, () => this.heartbeat(), 'runner heartbeat');
    const watch = setInterval(() => this.watchLeases(), LEASE_WATCH_INTERVAL_MS);
    watch.unref();
    this.timers.push(watch);
    every(this.options.lease?.reaperIntervalMs ?? SESSION_LEASE.reaperIntervalMs, () => this.reap(), 'session reaper');
  }

  /** Engines warm: placement may choose this runner from now on. */
  async ready(): Promise<void> {
    if (this.stateNow !== 'starting') return;
    this.stateNow = 'ready';
    // A heartbeat in flight read `starting` and would write it after us: the next one says `ready`
    // (before this, placement skipped a runner that had just said ready for up to one heartbeat).
    await this.beating?.catch(() => undefined);
    // Not fatal (the runner's entry point awaits this at top level): the next heartbeat says ready.
    await this.heartbeat().catch((err) => this.log.warn({ err }, 'could not say ready in the registry; the next heartbeat will'));
  }

  /** Starts the bot of a session placed here; resolves with the visitor's `room_url` and token. */
  start(sessionId: string): Promise<{ readonly room_url: string; readonly token: string }> {
    const started = this.startNow(sessionId);
    const tracked = started.catch(() => undefined);
    this.starting.add(tracked);
    void tracked.finally(() => this.starting.delete(tracked));
    return started;
  }

  /**
   * Waits (at most `timeoutMs`) for the starts already accepted: a shutdown that looked only at
   * the live sessions missed a start under way, whose bot then ran on after the runner closed
   * (no heartbeat, the registry row gone: its call ended `runner_lost`).
   */
  private async settleStarts(timeoutMs: number): Promise<void> {
    if (this.starting.size === 0) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.allSettled([...this.starting]), new Promise((resolve) => (timer = setTimeout(resolve, timeoutMs)))]);
    clearTimeout(timer);
  }

  private async startNow(sessionId: string): Promise<{ readonly room_url: string; readonly token: string }> {
    if (this.stateNow !== 'ready') throw this.refuse(this.stateNow === 'draining' ? 'runner_draining' : 'runner_starting', 503, `this runner is ${this.stateNow}`);
    const lease = this.options.capacity.tryAcquire();
    if (!lease) throw this.refuse('runner_full', 503, 'this runner has no capacity for another session right now');
    const claimingAt = performance.now();
    const claimed = await this.options.fleet.claim(sessionId, this.options.identity.runnerId, this.options.rooms.name).catch((err) => {
      lease.release();
      throw err;
    });
    if (!claimed) {
      lease.release();
      throw this.refuse('not_placed_here', 409, 'this session is not placed on this runner');
    }
    let room: AvatarRoom;
    try {
      // As on a single server (live-sessions.ts): TURN credentials and the visitor's room token
      // last as long as the session can (a page whose network changed joins again with it).
      const sessionMs = claimed.appliedLimitSeconds * 1000 + SESSION_TIMEOUTS.limitFarewellMs + SESSION_TIMEOUTS.stopTimeoutMs;
      room = await this.options.rooms.createRoom({ name: claimed.room, mediaTtlMs: sessionMs, tokenTtlMs: sessionMs });
    } catch (err) {
      lease.release();
      this.log.warn({ err, sessionId }, 'room creation failed');
      this.counts.startFailures++;
      // A failed write is logged, not answered 500: the API process would take this runner, which
      // answered, for an unreachable one and avoid it. The reaper ends the row if this did not.
      await this.options.store
        .finish(sessionId, claimed.callId, { terminationReason: 'room_creation_failed', failureReason: 'room_creation_failed', participantCount: 0, metadata: { failure_detail: (err as Error).message } })
        .catch((error) => this.log.error({ err: error, sessionId }, 'could not record a session whose room could not be created'));
      throw new RunnerStartFailure('the room could not be created', 'room_creation_failed');
    }
    const local: RunnerSession = { sessionId, callId: claimed.callId, room, capacity: lease, running: null, finished: null, heldUntil: claimingAt + this.options.fleet.leaseMs };
    this.local.set(sessionId, local);
    try {
      const principal = { organizationId: claimed.organizationId, apiKeyId: 'session', createdBy: 'session' };
      const agent: AgentRuntimeRecord = await this.options.agents.get(principal, claimed.agentId);
      // A third_party agent's provider key is decrypted here, for this session's provider only:
      // never sent over the network, logged or stored by the runner.
      const stsApiKey = agent.mode === 'third_party' ? (await this.options.agents.providerKey(principal, claimed.agentId)).apiKey : null;
      const startedUp = this.options.capacity.startingUp();
      try {
        local.running = await startWithin(
          this.options.runner.start({ sessionId, callId: claimed.callId, agent, clientUserRef: claimed.clientUserRef, room, stsApiKey }),
          this.options.startTimeoutMs ?? SESSION_TIMEOUTS.startTimeoutMs,
          (err) => this.log.warn({ err, sessionId }, 'a bot start given up on ended late'),
        );
      } finally {
        startedUp();
      }
    } catch (err) {
      this.log.error({ err, sessionId }, 'bot start failed');
      this.counts.startFailures++;
      const known = err instanceof ProviderStartError ? err.code : (err as { failureCode?: unknown })?.failureCode;
      await this.finish(local, { terminationReason: 'bot_start_failed', failureDetail: withoutPaths((err as Error).message), ...(typeof known === 'string' ? { failureCode: known } : {}), participantCount: 0, metadata: {} });
      throw new RunnerStartFailure('the agent could not be started');
    }
    this.counts.started++;
    this.bound(local, claimed.appliedLimitSeconds * 1000 - claimed.ageSeconds * 1000);
    await this.options.store.markActive(sessionId, (err, willRetry) => this.log.warn({ err, sessionId, willRetry }, 'could not mark the session active'));
    void local.running.ended.then(
      (outcome) => this.finish(local, outcome),
      (err) => this.finish(local, { terminationReason: 'pipeline_error', failureDetail: (err as Error)?.message ?? String(err), participantCount: 0, metadata: {} }),
    );
    this.log.info({ sessionId, agentId: claimed.agentId, room: room.room }, 'session started');
    return { room_url: room.roomUrl, token: room.subscriberToken };
  }

  /** A release was requested for one of this runner's sessions: look now (the heartbeat would, later). */
  async nudge(): Promise<void> {
    // A heartbeat in flight may have read the session before its release was recorded.
    await this.beating?.catch(() => undefined);
    await this.heartbeat();
  }

  /**
   * SIGTERM: no new session from now on (the registry says `draining` at once, and starts are
   * refused); the live ones go on until they end or `timeoutMs` passes, then end `server_shutdown`.
   */
  async drain(timeoutMs: number): Promise<void> {
    if (this.stateNow !== 'draining') this.counts.drains++;
    this.stateNow = 'draining';
    await this.beating?.catch(() => undefined); // (as in `ready`: a beat in flight read the old state)
    await this.heartbeat().catch((err) => this.log.warn({ err }, 'could not say draining in the registry'));
    const drainStarted = Date.now();
    await this.settleStarts(timeoutMs);
    this.log.info({ live: this.local.size, timeoutMs }, 'draining: no new sessions; waiting for the live ones to end');
    timeoutMs = Math.max(0, timeoutMs - (Date.now() - drainStarted));
    if (this.local.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      const empty = new Promise<void>((resolve) => this.emptied.push(resolve));
      const timedOut = await Promise.race([empty.then(() => false), new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), timeoutMs)))]);
      clearTimeout(timer);
      if (timedOut) {
        this.log.warn({ live: this.local.size }, 'drain timeout: ending the sessions still live (server_shutdown)');
        await Promise.allSettled([...this.local.values()].map((s) => this.stop(s, 'server_shutdown')));
      }
    }
  }

  /** Ends whatever is still live (`reason`), stops the timers and removes the registry row. */
  async close(reason: TerminationReason = 'server_shutdown'): Promise<void> {
    this.stateNow = 'draining';
    await this.settleStarts(FLEET.startTimeoutMs);
    await Promise.allSettled([...this.local.values()].map((s) => this.stop(s, reason)));
    for (const timer of this.timers) clearInterval(timer);
    this.closed = true;
    await this.beating?.catch(() => undefined);
    this.options.store.close();
    await this.options.fleet.deregister(this.options.identity.runnerId).catch((err) => this.log.warn({ err }, 'could not remove the registry row'));
  }

  private refuse(code: RunnerRefusalCode, status: 503 | 409, message: string): RunnerRefusal {
    this.counts.refused[code] = (this.counts.refused[code] ?? 0) + 1;
    return new RunnerRefusal(code, status, message);
  }

  private bound(local: RunnerSession, remainingMs: number): void {
    const ms = Math.max(0, remainingMs) + SESSION_TIMEOUTS.limitFarewellMs + SESSION_TIMEOUTS.stopTimeoutMs;
    local.limitTimer = setTimeout(() => {
      this.log.warn({ sessionId: local.sessionId }, 'session still running past its limit: stopped by the runner');
      void this.stop(local, 'session_limit_reached');
    }, ms);
    local.limitTimer.unref();
  }

  private async stop(local: RunnerSession, reason: TerminationReason): Promise<void> {
    if (!local.running) return local.finished ?? undefined;
    const outcome = await local.running.stop(reason).catch((err): SessionOutcome => ({ terminationReason: 'pipeline_error', failureDetail: (err as Error).message, participantCount: 0, metadata: {} }));
    await this.finish(local, outcome);
  }

  private finish(local: RunnerSession, outcome: SessionOutcome): Promise<void> {
    clearTimeout(local.limitTimer);
    local.finished ??= (async () => {
      this.counts.ended[outcome.terminationReason] = (this.counts.ended[outcome.terminationReason] ?? 0) + 1;
      await endSession({ rooms: this.options.rooms, store: this.options.store, log: this.log }, local, outcome);
      this.local.delete(local.sessionId);
      this.log.info({ sessionId: local.sessionId, reason: outcome.terminationReason }, 'session ended');
      if (this.local.size === 0) for (const wake of this.emptied.splice(0)) wake();
    })();
    return local.finished;
  }

  private load(): ReportedLoad {
    const reading = this.options.capacity.meter.read();
    const round = (n: number) => Math.round(n * 1000) / 1000;
    this.lastLoad = {
      cpu_share: round(reading.cpuShare), late_frame_share: round(reading.lateFrameShare), event_loop_lag_ms: round(reading.eventLoopLagMs),
      bound: this.options.loadBound ?? FLEET.loadBound,
    };
    return this.lastLoad;
  }

  /** The registry row, then the leases of the sessions this runner runs (and their release requests). */
  private heartbeat(): Promise<void> {
    // Closed: a release nudge or a late timer must not write the registry row back (it would
    // stand for a runner that is gone, placeable for a heartbeat's staleness).
    if (this.closed) return Promise.resolve();
    this.beating ??= (async () => {
      try {
        const { identity } = this.options;
        await this.options.fleet.heartbeat({ ...identity, state: this.stateNow, live: this.local.size, load: this.load() });
        // Sessions still starting are renewed too: a bot start longer than the lease let the
        // reaper end a session part-way, and it stopped counting against the slots meanwhile.
        const held = [...this.local.values()].filter((s) => !s.finished);
        if (held.length === 0) return;
        const renewingAt = performance.now();
        const rows = await this.options.fleet.renew(identity.runnerId, held.map((s) => s.sessionId));
        for (const local of held) if (rows.has(local.sessionId)) local.heldUntil = Math.max(local.heldUntil, renewingAt + this.options.fleet.leaseMs);
        const running = held.filter((s) => s.running);
        for (const local of running) {
          const row = rows.get(local.sessionId);
          // Our row is gone: a reaper took the session while this runner stalled. Stop the bot.
          if (!row) void this.stop(local, 'runner_lost');
          else if (row.releaseRequested) void this.stop(local, 'client_released');
        }
      } finally {
        this.beating = null;
      }
    })();
    return this.beating;
  }

  /**
   * Sessions whose lease this runner could not renew in time (its database unreachable or stalled
   * while visitors still reach it) are stopped `runner_lost`, as on a single server
   * (`overdueLeases`). Checked on a timer of its own: a heartbeat stuck on a dead connection checks nothing.
   */
  private watchLeases(): void {
    for (const local of overdueLeases(this.local.values(), performance.now())) {
      this.log.error({ sessionId: local.sessionId, overdueMs: Math.round(performance.now() - local.heldUntil) }, 'session lease not renewed in time (database unreachable?): bot stopped (runner_lost)');
      void this.stop(local, 'runner_lost');
    }
  }

  private async reap(): Promise<void> {
    const forgotten = await this.options.fleet.forgetDead().catch((err) => {
      this.log.warn({ err }, 'could not remove dead runners\' rows');
      return [];
    });
    if (forgotten.length) this.log.info({ runners: forgotten }, `dead runners' registry rows removed (no heartbeat for ${FLEET.forgetRunnerAfterMs / 60_000} min, no session left)`);
    const reaped = await this.options.store.reap();
    for (const r of reaped) {
      this.log.warn({ sessionId: r.sessionId, runnerId: r.runnerId }, 'session lease lapsed: call failed (runner_lost)');
      const local = this.local.get(r.sessionId);
      if (local && local.running && !local.finished) void this.stop(local, 'runner_lost');
    }
  }
}
