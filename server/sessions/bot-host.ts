/**
 * Bots off the HTTP event loop (ARCHITECTURE.md): the server's side of its bot host, a child
 * process (bot-host-process.ts) that runs the Session API's bots and owns the embedded session
 * rooms. To the Session API it is a `SessionRunner` and a `RoomProvider` like the in-process ones;
 * to the rooms' signalling socket it is a `SignallingDelegate` (a visitor's upgrade for one of its
 * rooms is handed over, socket and all). Why a process and not a worker thread: libwebrtc for Node
 * aborts when any thread but the main one creates its objects.
 *
 * - The host is forked when this is created and again on the next session after it died.
 * - What a bot needs from the database (the agent, its face and reference image, a third-party
 *   key) is resolved here and sent with the session; the host has no database.
 * - If the host dies, every session it ran ends `runner_lost` at once (the call is `failed`, the
 *   slot is free, `participant_count` the peak it last reported): the server and its other work go on.
 * - `close()` ends the host's sessions (their outcomes reach the Session API first), then the
 *   host; a host that does not exit in time is killed.
 * - Its load (face frames' lateness, CPU time) comes back for the capacity gate and /metrics.
 *
 * docs/sessions.md, "Where bots run".
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import {
  SESSION_TIMEOUTS,
  type RunningSession,
  type SessionOutcome,
  type SessionRunner,
  type SessionStart,
  type TerminationReason,
} from '../../agent/session-contract.ts';
import { ProviderStartError } from '../../agent/agent-pipeline.ts';
import { embeddedAvatarRoom, type AvatarRoom, type RoomCreateOptions, type RoomProvider } from '../../transports/webrtc/room-provider.ts';
import type { CreatedRoom } from '../../transports/webrtc/room-registry.ts';
import { RoomError } from '../../transports/webrtc/room-errors.ts';
import type { SignallingDelegate, UpgradeRequest } from '../rooms/room-signalling.ts';
import type { SessionFaceResolver } from './agent-face.ts';
import { handOverSocket } from './socket-handover.ts';
import type { BotHostInit, FromHost, HostReplyValue, HostRequest, ToHost } from './bot-host-protocol.ts';

export const BOT_HOST_DEFAULTS = {
  /** How often the host reports its frames' lateness and CPU time. */
  loadReportMs: 250,
  /** How long the host may take to start (load its plugins) before a session's start fails. */
  startTimeoutMs: 30_000,
  /** After `close()` asked the host to end its sessions: how long before it is killed. */
  exitTimeoutMs: SESSION_TIMEOUTS.stopTimeoutMs + 5_000,
} as const;

export interface BotHostOptions {
  readonly init: Omit<BotHostInit, 'loadReportMs'>;
  /** Public address of the signalling socket, as EmbeddedRoomProvider takes it. */
  readonly signalUrl: string;
  readonly resolveFace: SessionFaceResolver;
  readonly logger: Logger;
  /** Each face frame's lateness (ms) against its due time, as the host reports them. */
  readonly onFrameLateness?: (lateMs: number) => void;
  /** The host's entry point (default bot-host-process.ts beside this file). */
  readonly entry?: string;
  readonly loadReportMs?: number;
}

interface Pending {
  resolve(value: HostReplyValue): void;
  reject(error: Error): void;
}

class HostedSession implements RunningSession {
  readonly ended: Promise<SessionOutcome>;
  /** Peak visitors as the host last reported it (recorded if the host dies). */
  participantPeak = 0;
  settle!: (outcome: SessionOutcome) => void;
  private stopping: Promise<SessionOutcome> | undefined;

  constructor(
    readonly sessionId: string,
    private readonly host: BotHost,
    readonly child: ChildProcess,
  ) {
    this.ended = new Promise((resolve) => (this.settle = resolve));
  }

  stop(reason: TerminationReason): Promise<SessionOutcome> {
    this.stopping ??= this.host
      .requestStop(this.child, this.sessionId, reason)
      .then((outcome) => outcome ?? this.ended)
      .then((outcome) => {
        this.settle(outcome);
        return outcome;
      });
    return this.stopping;
  }
}

export class BotHost implements SessionRunner, RoomProvider, SignallingDelegate {
  readonly name = 'embedded' as const;
  private child: ChildProcess | null = null;
  private ready: Promise<ChildProcess> | null = null;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly sessions = new Map<string, HostedSession>();
  /** Rooms the host holds (their signalling upgrades go to it). */
  private readonly rooms = new Set<string>();
  /** CPU time of hosts that have exited, plus the live one's last report. */
  private cpuBase = { user: 0, system: 0 };
  private cpuLive = { user: 0, system: 0 };
  private closing = false;
  private readonly log: Logger;

  constructor(private readonly options: BotHostOptions) {
    this.log = options.logger.child({ component: 'bot-host' });
    void this.launch().catch(() => undefined);
  }

  /** Sessions the host runs now. */
  get live(): number {
    return this.sessions.size;
  }

  /** A session's peak visitor count as the host last reported it (undefined: no such session here). */
  participantPeakOf(sessionId: string): number | undefined {
    return this.sessions.get(sessionId)?.participantPeak;
  }

  /** The host's process id (undefined while none runs). */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** The host's CPU time so far, over every host this server started. */
  cpuUsage(): NodeJS.CpuUsage {
    return { user: this.cpuBase.user + this.cpuLive.user, system: this.cpuBase.system + this.cpuLive.system };
  }

  // ---- RoomProvider ---------------------------------------------------------------------------

  async createRoom(options: RoomCreateOptions = {}): Promise<AvatarRoom> {
    const name = options.name;
    if (!name) throw new RoomError('room_creation_failed', 'rooms of the bot host are created with a name');
    let created: CreatedRoom;
    try {
      const child = await this.launch();
      created = (await this.request(child, {
        t: 'create-room',
        id: 0,
        name,
        ...(options.tokenTtlMs === undefined ? {} : { tokenTtlMs: options.tokenTtlMs }),
        ...(options.mediaTtlMs === undefined ? {} : { mediaTtlMs: options.mediaTtlMs }),
      })) as CreatedRoom;
    } catch (err) {
      throw new RoomError('room_creation_failed', `the bot host could not create the room: ${(err as Error).message}`);
    }
    this.rooms.add(created.room);
    return embeddedAvatarRoom(created, this.options.signalUrl, options.baseUrl);
  }

  async closeRoom(room: string): Promise<boolean> {
    const held = this.rooms.delete(room);
    const child = this.child;
    if (!held || !child) return false;
    return (await this.request(child, { t: 'close-room', id: 0, room }).catch(() => false)) as boolean;
  }

  // ---- SignallingDelegate ---------------------------------------------------------------------

  owns(room: string): boolean {
    return this.rooms.has(room);
  }

  forward(req: UpgradeRequest, socket: Duplex, head: Buffer): void {
    const child = this.child;
    if (!child?.connected) {
      socket.destroy();
      return;
    }
    const message: ToHost = { t: 'upgrade', url: req.url ?? '/', method: req.method ?? 'GET', headers: { ...req.headers }, head: new Uint8Array(head) };
    // The descriptor goes to the host and this process forgets it, stopping its own reads first
    // (a visitor's `join` could otherwise be read here and lost: socket-handover.ts).
    handOverSocket(child, message, socket, (err) => this.log.warn({ err }, 'could not hand a signalling upgrade to the bot host'));
  }

  // ---- SessionRunner --------------------------------------------------------------------------

  async start(session: SessionStart): Promise<RunningSession> {
    const face = await this.options.resolveFace(session.agent);
    const child = await this.launch();
    const hosted = new HostedSession(session.sessionId, this, child);
    this.sessions.set(session.sessionId, hosted);
    void hosted.ended.then(() => this.sessions.delete(session.sessionId));
    try {
      await this.request(child, { t: 'start', id: 0, session, face });
    } catch (err) {
      this.sessions.delete(session.sessionId);
      throw err;
    }
    return hosted;
  }

  /** @internal (HostedSession): asks the host to stop one session; null when it was not there. */
  async requestStop(child: ChildProcess, sessionId: string, reason: TerminationReason): Promise<SessionOutcome | null> {
    if (child !== this.child) return null; // that host is gone: the session already ended runner_lost
    try {
      return (await this.request(child, { t: 'stop', id: 0, sessionId, reason })) as SessionOutcome | null;
    } catch {
      return null;
    }
  }

  /** Ends the host's sessions (server_shutdown), then the host. */
  async close(): Promise<void> {
    this.closing = true;
    const child = this.child;
    if (!child) return;
    const exited = new Promise<void>((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve() : child.once('exit', () => resolve())));
    if (child.connected) child.send({ t: 'shutdown', reason: 'server_shutdown' } satisfies ToHost);
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([exited.then(() => false), new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), BOT_HOST_DEFAULTS.exitTimeoutMs)))]);
    clearTimeout(timer);
    if (timedOut) {
      this.log.warn({ pid: child.pid }, 'the bot host did not exit in time: killed');
      child.kill('SIGKILL');
      await exited;
    }
  }

  // ---- the child ------------------------------------------------------------------------------

  private launch(): Promise<ChildProcess> {
    if (this.closing) return Promise.reject(new Error('the server is shutting down'));
    if (this.ready) return this.ready;
    const entry = this.options.entry ?? fileURLToPath(new URL('./bot-host-process.ts', import.meta.url));
    // The same Node options as this process (the TypeScript loader under `npm start`); stdout and
    // stderr are this process's (one log stream).
    const child = fork(entry, [], { serialization: 'advanced', stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    this.child = child;
    const init: BotHostInit = { ...this.options.init, loadReportMs: this.options.loadReportMs ?? BOT_HOST_DEFAULTS.loadReportMs };
    this.ready = new Promise<ChildProcess>((resolve, reject) => {
      // A host that does not come up is killed: its exit lets the next session fork another.
      const timer = setTimeout(() => {
        reject(new Error(`the bot host did not start within ${BOT_HOST_DEFAULTS.startTimeoutMs} ms`));
        child.kill('SIGKILL');
      }, BOT_HOST_DEFAULTS.startTimeoutMs);
      timer.unref();
      child.on('message', (message: FromHost) => {
        if (message.t === 'ready') {
          clearTimeout(timer);
          resolve(child);
        } else this.onMessage(message);
      });
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`the bot host exited (${signal ?? `code ${code}`}) before it was ready`));
        this.onExit(child, code, signal);
      });
      child.on('error', (err) => {
        this.log.error({ err }, 'bot host process error');
        reject(err);
      });
    });
    this.ready.catch(() => undefined);
    child.send({ t: 'init', init } satisfies ToHost);
    this.log.info({ pid: child.pid }, 'bot host started');
    return this.ready;
  }

  private request(child: ChildProcess, message: HostRequest): Promise<HostReplyValue> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      if (!child.connected || child !== this.child) {
        reject(new Error('the bot host is not running'));
        return;
      }
      this.pending.set(id, { resolve, reject });
      child.send({ ...message, id }, (err) => {
        if (err && this.pending.delete(id)) reject(err);
      });
    });
  }

  private onMessage(message: FromHost): void {
    switch (message.t) {
      case 'reply': {
        const pending = this.pending.get(message.id);
        if (!pending) return;
        this.pending.delete(message.id);
        if (message.ok) pending.resolve(message.value);
        else pending.reject(message.code ? new ProviderStartError(message.code, message.error) : new Error(message.error));
        return;
      }
      case 'ended':
        this.sessions.get(message.sessionId)?.settle(message.outcome);
        return;
      case 'load':
        this.cpuLive = message.cpu;
        for (const [sessionId, peak] of Object.entries(message.peaks)) {
          const session = this.sessions.get(sessionId);
          if (session) session.participantPeak = peak;
        }
        if (this.options.onFrameLateness) for (const ms of message.lateness) this.options.onFrameLateness(ms);
        return;
      case 'ready':
        return;
    }
  }

  private onExit(child: ChildProcess, code: number | null, signal: NodeJS.Signals | null): void {
    if (child !== this.child) return;
    this.child = null;
    this.ready = null;
    this.cpuBase = this.cpuUsage();
    this.cpuLive = { user: 0, system: 0 };
    this.rooms.clear();
    const how = signal ?? `code ${code}`;
    for (const pending of this.pending.values()) pending.reject(new Error(`the bot host exited (${how})`));
    this.pending.clear();
    if (!this.closing || this.sessions.size > 0) this.log[this.closing ? 'warn' : 'error']({ pid: child.pid, code, signal, sessions: this.sessions.size }, 'the bot host exited');
    for (const session of this.sessions.values()) {
      session.settle({ terminationReason: 'runner_lost', failureDetail: `the bot host process exited (${how})`, failureCode: 'runner_lost', participantCount: session.participantPeak, metadata: {} });
    }
    this.sessions.clear();
  }
}
