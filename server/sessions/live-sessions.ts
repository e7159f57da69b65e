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
import type { RunningSession, SessionOutcome, SessionRunner, TerminationReason } from '../../agent/session-contract.ts';
import type { AvatarRoom, RoomProvider } from '../../transports/webrtc/room-provider.ts';
import type { Db } from '../db/connect.ts';
import type { Agents } from '../services/agents.ts';
import { checkOrigin } from './origin-allowlist.ts';
import { verifyConnectToken } from './connect-auth.ts';
import { SessionError } from './session-errors.ts';
import { SESSION_LEASE, SessionStore } from './session-store.ts';

/** A process-wide capacity gate (server/capacity): one lease per running bot. */
export interface BotCapacity {
  tryAcquire(): { release(): void } | null;
}

export interface LiveSessionsOptions {
  readonly db: Db;
  readonly agents: Agents;
  readonly rooms: RoomProvider;
  readonly runner: SessionRunner;
  readonly logger: Logger;
  readonly capacity?: BotCapacity;
  /** Lease timings (tests shorten them); defaults SESSION_LEASE. */
  readonly lease?: Partial<Pick<typeof SESSION_LEASE, 'leaseMs' | 'heartbeatMs' | 'reaperIntervalMs'>>;
  /** This process's name in `agent_sessions.runner_id`; default host:pid:random. */
  readonly runnerId?: string;
  /** How long shutdown waits for sessions to end before giving up on them (their leases lapse). */
  readonly shutdownTimeoutMs?: number;
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
  readonly callId: string;
  readonly room: AvatarRoom;
  readonly capacity: { release(): void } | null;
  running: RunningSession | null;
  finished: Promise<void> | null;
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

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Room names carry 192 random bits: knowing one is enough to end its session. */
export function newRoomName(): string {
  return `s_${randomBytes(24).toString('base64url')}`;
}

export class LiveSessions {
  readonly store: SessionStore;
  private readonly local = new Map<string, LocalSession>();
  private readonly byRoom = new Map<string, string>();
  private readonly timers: NodeJS.Timeout[] = [];
  private closing = false;
  private readonly log: Logger;
  private readonly counts = { started: 0, refused: {} as Record<string, number>, ended: {} as Record<string, number> };

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
    every(this.options.lease?.reaperIntervalMs ?? SESSION_LEASE.reaperIntervalMs, () => this.reap().then(() => undefined), 'session reaper');
  }

  get size(): number {
    return this.local.size;
  }

  /** Counters for metrics; reading them changes nothing. */
  stats(): LiveSessionStats {
    return { live: this.local.size, started: this.counts.started, refused: { ...this.counts.refused }, ended: { ...this.counts.ended } };
  }

  async connect(request: ConnectRequest): Promise<SessionGrant> {
    try {
      const grant = await this.admitAndStart(request);
      this.counts.started++;
      return grant;
    } catch (err) {
      const code = err instanceof SessionError ? err.code : 'internal_error';
      this.counts.refused[code] = (this.counts.refused[code] ?? 0) + 1;
      throw err;
    }
  }

  private async admitAndStart(request: ConnectRequest): Promise<SessionGrant> {
    if (this.closing) throw new SessionError('server_busy', 'this server is shutting down', SESSION_RETRY.serverBusySeconds);
    if (!UUID_RE.test(request.agentId)) throw new SessionError('agent_not_found', `agent ${request.agentId} not found`);
    const row = await this.options.agents.findById(request.agentId);
    if (!row) throw new SessionError('agent_not_found', `agent ${request.agentId} not found`);
    if (row.status !== 'published') throw new SessionError('agent_unpublished', `agent ${request.agentId} is not published`);
    const origin = checkOrigin(row.allowed_hostnames as string[] | null, request.origin);
    if (!origin.allowed) throw new SessionError('auth_failed', origin.reason);
    if (row.auth_enabled) {
      const secret = this.options.agents.authSecretOf(row);
      const problem = secret === null ? 'this agent has auth_enabled but no auth secret' : verifyConnectToken(secret, row.agent_id, request.authToken, request.clientUserRef, Date.now());
      if (problem) throw new SessionError('auth_failed', problem);
    }

    // Taken inside the admission transaction, after the agent's own limit passed.
    const held: { lease: { release(): void } | null } = { lease: null };
    const gate = this.options.capacity;
    const reserve = gate ? () => (held.lease = gate.tryAcquire()) !== null : undefined;
    const roomName = newRoomName();
    let admission;
    try {
      admission = await this.store.admit({ agentId: row.agent_id, room: roomName, roomProvider: this.options.rooms.name, clientUserRef: request.clientUserRef, origin: request.origin ?? null }, reserve);
    } catch (err) {
      held.lease?.release();
      throw err;
    }
    if (!admission.admitted) {
      held.lease?.release();
      if (admission.reason === 'concurrency_limit') {
        throw new SessionError('concurrency_limit', `agent ${row.agent_id} already has ${admission.live} of ${admission.limit} sessions`, admission.retryAfterSeconds);
      }
      if (admission.reason === 'server_busy') throw new SessionError('server_busy', 'this server has no capacity for another session right now', SESSION_RETRY.serverBusySeconds);
      throw new SessionError(admission.reason, admission.reason === 'agent_not_found' ? `agent ${row.agent_id} not found` : `agent ${row.agent_id} is not published`);
    }
    const { sessionId, callId } = admission;

    let room: AvatarRoom;
    try {
      room = await this.options.rooms.createRoom({ name: roomName, ...(request.baseUrl ? { baseUrl: request.baseUrl } : {}) });
    } catch (err) {
      this.log.warn({ err, sessionId }, 'room creation failed');
      await this.store.finish(sessionId, callId, { terminationReason: 'room_creation_failed', failureReason: 'room_creation_failed', participantCount: 0, metadata: { failure_detail: (err as Error).message } });
      held.lease?.release();
      throw new SessionError('room_creation_failed', 'the WebRTC room could not be created');
    }
    const local: LocalSession = { sessionId, callId, room, capacity: held.lease, running: null, finished: null };
    this.local.set(sessionId, local);
    this.byRoom.set(room.room, sessionId);

    let agent: AgentRuntimeRecord;
    try {
      const principal = { organizationId: admission.organizationId, apiKeyId: 'session', createdBy: 'session' };
      agent = await this.options.agents.get(principal, row.agent_id);
      // A third_party agent's provider key is decrypted here, for this session's provider only.
      const stsApiKey = agent.mode === 'third_party' ? (await this.options.agents.providerKey(principal, row.agent_id)).apiKey : null;
      local.running = await this.options.runner.start({ sessionId, callId, agent, clientUserRef: request.clientUserRef, room, stsApiKey });
    } catch (err) {
      this.log.error({ err, sessionId }, 'bot start failed');
      // A provider that cannot start (no key) says which: `tts_key_missing` rather than `bot_start_failed`.
      const failureCode = err instanceof ProviderStartError ? err.code : undefined;
      await this.finish(local, { terminationReason: 'bot_start_failed', failureDetail: (err as Error).message, ...(failureCode ? { failureCode } : {}), participantCount: 0, metadata: {} });
      throw new SessionError('orchestrator_error', 'the agent could not be started');
    }
    await this.store.markActive(sessionId).catch((err) => this.log.warn({ err, sessionId }, 'could not mark the session active'));
    void local.running.ended.then(
      (outcome) => this.finish(local, outcome),
      (err) => this.finish(local, { terminationReason: 'pipeline_error', failureDetail: (err as Error)?.message ?? String(err), participantCount: 0, metadata: {} }),
    );
    this.log.info({ sessionId, agentId: row.agent_id, room: room.room }, 'session started');
    return { session_id: sessionId, room_url: room.roomUrl, token: room.subscriberToken };
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

  /** Ends every session of this process (SIGTERM) and stops the timers. */
  async close(reason: TerminationReason = 'server_shutdown'): Promise<void> {
    this.closing = true;
    for (const timer of this.timers) clearInterval(timer);
    const endings = [...this.local.values()].map((s) => this.stop(s, reason));
    const timeoutMs = this.options.shutdownTimeoutMs ?? 10_000;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.allSettled(endings), new Promise((resolve) => (timer = setTimeout(resolve, timeoutMs)))]);
    clearTimeout(timer);
  }

  private async stop(local: LocalSession, reason: TerminationReason): Promise<void> {
    if (!local.running) return local.finished ?? undefined;
    const outcome = await local.running.stop(reason).catch((err): SessionOutcome => ({ terminationReason: 'pipeline_error', failureDetail: (err as Error).message, participantCount: 0, metadata: {} }));
    await this.finish(local, outcome);
  }

  private finish(local: LocalSession, outcome: SessionOutcome): Promise<void> {
    local.finished ??= (async () => {
      this.counts.ended[outcome.terminationReason] = (this.counts.ended[outcome.terminationReason] ?? 0) + 1;
      try {
        await this.store.finish(local.sessionId, local.callId, {
          terminationReason: outcome.terminationReason,
          failureReason: outcome.failureCode ?? null,
          participantCount: outcome.participantCount,
          metadata: { ...outcome.metadata, ...(outcome.failureDetail ? { failure_detail: outcome.failureDetail } : {}) },
        });
      } catch (err) {
        // The lease lapses and a reaper ends the call; the slot is not lost.
        this.log.error({ err, sessionId: local.sessionId }, 'could not record the end of a session');
      }
      await this.options.rooms.closeRoom(local.room.room).catch((err) => this.log.warn({ err, room: local.room.room }, 'room close failed'));
      local.capacity?.release();
      this.local.delete(local.sessionId);
      this.byRoom.delete(local.room.room);
      this.log.info({ sessionId: local.sessionId, reason: outcome.terminationReason }, 'session ended');
    })();
    return local.finished;
  }

  private async heartbeat(): Promise<void> {
    if (this.local.size === 0) return;
    const held = await this.store.heartbeat();
    for (const local of [...this.local.values()]) {
      if (!local.running || local.finished) continue;
      const row = held.get(local.sessionId);
      // Our row is gone: a reaper took the session while this process stalled. Stop the bot.
      if (!row) void this.stop(local, 'runner_lost');
      else if (row.releaseRequested) void this.stop(local, 'client_released');
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
