/**
 * The embedded rooms' signalling WebSocket (default path /v1/rooms/signal): authenticates a
 * participant with a room token, then relays offers, answers and ICE candidates between the
 * browser and the room's server-side peer. The token comes in the first message (`join`) or in
 * an `Authorization: Bearer` header (non-browser clients); a token in the URL is refused, so it
 * never lands in access logs. Every client mistake gets a typed error; nothing a client sends
 * can crash the server or disturb another room. Protocol: docs/webrtc.md.
 */
import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import { RoomError } from '../../transports/webrtc/room-errors.ts';
import type { RoomParticipant } from '../../transports/webrtc/room.ts';
import type { RoomRegistry } from '../../transports/webrtc/room-registry.ts';
import { registerUpgrade } from '../http/upgrades.ts';
import { ReportThrottle } from '../../core/report-throttle.ts';
import {
  SIGNALLING_CLOSE_CODES,
  SIGNALLING_LIMITS,
  SignallingError,
  parseSignallingMessage,
  type SignallingClientMessage,
  type SignallingErrorCode,
  type SignallingServerMessage,
} from '../../protocol/room-signalling.ts';

export const ROOM_SIGNALLING_DEFAULTS = {
  path: '/v1/rooms/signal',
  /** A connection that has not joined within this time is closed with `join_timeout`. */
  joinTimeoutMs: SIGNALLING_LIMITS.joinTimeoutMs,
  /** Messages per second per connection before `rate_limited`. */
  maxMessagesPerSecond: SIGNALLING_LIMITS.maxMessagesPerSecond,
  /**
   * WebSocket pings this often; a connection that missed the previous pong is dropped (a
   * vanished browser must not hold its room slot and server-side peer forever).
   */
  heartbeatIntervalMs: 30_000,
} as const;

export interface RoomSignallingOptions {
  readonly rooms: RoomRegistry;
  readonly path?: string;
  readonly joinTimeoutMs?: number;
  readonly maxMessagesPerSecond?: number;
  readonly heartbeatIntervalMs?: number;
  readonly log?: (event: string, details: Record<string, unknown>) => void;
  /**
   * Rooms that live in another process of this server (the bot host, server/sessions/bot-host.ts):
   * an upgrade whose URL names such a room (`?room=`) is handed over, socket and all, instead of
   * being served from `rooms`.
   */
  readonly delegate?: SignallingDelegate;
}

export interface SignallingDelegate {
  owns(room: string): boolean;
  /** Takes the upgrade over; the socket is the delegate's from then on. */
  forward(req: UpgradeRequest, socket: Duplex, head: Buffer): void;
}

/** What serving an upgrade reads of its request (a request handed over from another process has only these). */
export type UpgradeRequest = Pick<IncomingMessage, 'url' | 'headers' | 'method'>;

export interface RoomSignalling {
  readonly connections: number;
  close(): Promise<void>;
}

/** The signalling socket mounted on the server's path. */
export interface AttachedRoomSignalling extends RoomSignalling {
  /** Hands upgrades for rooms of another process to `delegate` from now on (null: none). */
  delegateTo(delegate: SignallingDelegate | null): void;
}

/** The signalling socket without an HTTP server of its own: it serves upgrades handed to it. */
export interface RoomSignallingHandler extends RoomSignalling {
  handleUpgrade(req: UpgradeRequest, socket: Duplex, head: Buffer): void;
}

function bearerToken(req: UpgradeRequest): string | undefined {
  const auth = req.headers.authorization;
  if (auth?.startsWith('Bearer ')) return auth.slice(7).trim() || undefined;
  return undefined;
}

export function createRoomSignallingHandler(options: Omit<RoomSignallingOptions, 'path' | 'delegate'>): RoomSignallingHandler {
  const wss = new WebSocketServer({ noServer: true, maxPayload: SIGNALLING_LIMITS.hardMaxPayloadBytes });
  const live = new Set<SignallingConnection>();
  const log = options.log ?? (() => undefined);
  const heartbeat = setInterval(() => {
    for (const c of [...live]) c.heartbeat();
  }, options.heartbeatIntervalMs ?? ROOM_SIGNALLING_DEFAULTS.heartbeatIntervalMs);
  heartbeat.unref();
  return {
    handleUpgrade(req, socket, head) {
      const url = new URL(req.url ?? '/', 'http://localhost');
      wss.handleUpgrade(req as IncomingMessage, socket, head, (ws) => {
        const connection = new SignallingConnection(ws, {
          rooms: options.rooms,
          roomInUrl: url.searchParams.get('room') ?? undefined,
          tokenInUrl: url.searchParams.has('token') || url.searchParams.has('access_token'),
          headerToken: bearerToken(req),
          joinTimeoutMs: options.joinTimeoutMs ?? ROOM_SIGNALLING_DEFAULTS.joinTimeoutMs,
          maxMessagesPerSecond: options.maxMessagesPerSecond ?? ROOM_SIGNALLING_DEFAULTS.maxMessagesPerSecond,
          log,
          live,
        });
        connection.open();
      });
    },
    get connections() {
      return live.size;
    },
    async close() {
      clearInterval(heartbeat);
      for (const c of [...live]) c.shutdown('server shutting down');
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    },
  };
}

export function attachRoomSignalling(server: Server, options: RoomSignallingOptions): AttachedRoomSignalling {
  const path = options.path ?? ROOM_SIGNALLING_DEFAULTS.path;
  const handler = createRoomSignallingHandler(options);
  let delegate = options.delegate ?? null;
  const onUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (url.pathname !== path) return; // another upgrade handler's path
    const room = url.searchParams.get('room');
    if (delegate && room && delegate.owns(room)) delegate.forward(req, socket, head);
    else handler.handleUpgrade(req, socket, head);
  };
  const unregisterUpgrade = registerUpgrade(server, path, onUpgrade); // the server's dispatcher refuses other paths

  return {
    get connections() {
      return handler.connections;
    },
    delegateTo(next) {
      delegate = next;
    },
    async close() {
      unregisterUpgrade();
      await handler.close();
    },
  };
}

interface ConnectionDeps {
  rooms: RoomRegistry;
  roomInUrl: string | undefined;
  tokenInUrl: boolean;
  headerToken: string | undefined;
  joinTimeoutMs: number;
  maxMessagesPerSecond: number;
  log(event: string, details: Record<string, unknown>): void;
  live: Set<SignallingConnection>;
}

class SignallingConnection {
  private participant: RoomParticipant | null = null;
  private joinTimer: ReturnType<typeof setTimeout> | undefined;
  private joinCheck: ReturnType<typeof setImmediate> | undefined;
  private pongCheck: ReturnType<typeof setImmediate> | undefined;
  private closed = false;
  private awaitingPong = false;
  private windowStartMs = 0;
  private messagesInWindow = 0;
  /** One `rate_limited` reply per second at most: a reply per dropped message would echo the flood back. */
  private readonly rateLimitReplies = new ReportThrottle({ burst: 1, intervalMs: 1000 });
  /** Messages are handled one at a time, in order (an answer before its candidates). */
  private chain: Promise<void> = Promise.resolve();

  constructor(
    private readonly ws: WebSocket,
    private readonly deps: ConnectionDeps,
  ) {}

  open(): void {
    this.deps.live.add(this);
    this.ws.on('close', () => this.cleanup());
    this.ws.on('error', () => this.cleanup());
    this.ws.on('message', (data, isBinary) => this.onMessage(data, isBinary));
    this.ws.on('pong', () => (this.awaitingPong = false));
    if (this.deps.tokenInUrl) {
      this.fail(new SignallingError('auth_failed', 'room tokens are never accepted in the URL; send them in the `join` message or an Authorization header', true));
      return;
    }
    if (this.deps.headerToken) {
      try {
        this.join({ type: 'join', token: this.deps.headerToken, ...(this.deps.roomInUrl ? { room: this.deps.roomInUrl } : {}) });
      } catch (error) {
        this.fail(error);
      }
      return;
    }
    this.joinTimer = setTimeout(() => {
      // Judged after the event loop's next read of its sockets: Node runs due timers before it
      // reads, so a `join` that arrived while this loop was busy past the deadline (a bot host
      // starting a bot at nice 10 under load) would otherwise be refused unread.
      this.joinCheck = setImmediate(() => {
        if (!this.participant) this.fail(new SignallingError('join_timeout', `no \`join\` within ${this.deps.joinTimeoutMs} ms`, true));
      });
    }, this.deps.joinTimeoutMs);
  }

  /** Drops the connection if the previous ping went unanswered, then pings again. */
  heartbeat(): void {
    if (this.closed) return;
    if (!this.awaitingPong) return this.ping();
    // As the join deadline: judged after the loop's next read, so a pong that came while this
    // event loop was busy is not taken for a dead peer.
    clearImmediate(this.pongCheck);
    this.pongCheck = setImmediate(() => {
      if (this.closed) return;
      if (!this.awaitingPong) return this.ping();
      this.deps.log('room_signalling_dead', { participant_id: this.participant?.participantId ?? null });
      this.cleanup();
      this.ws.terminate();
    });
  }

  private ping(): void {
    this.awaitingPong = true;
    this.ws.ping();
  }

  shutdown(reason: string): void {
    this.send({ type: 'closed', reason });
    this.close(1001, reason);
  }

  private onMessage(data: RawData, isBinary: boolean): void {
    if (this.closed) return;
    if (!this.withinRate()) {
      const unanswered = this.rateLimitReplies.take();
      if (unanswered === null) return;
      const more = unanswered > 0 ? ` (and ${unanswered} more since the last reply, dropped without one)` : '';
      this.send({ type: 'error', code: 'rate_limited', message: `more than ${this.deps.maxMessagesPerSecond} messages per second; message dropped${more}`, fatal: false });
      return;
    }
    let message: SignallingClientMessage;
    try {
      if (isBinary) throw new SignallingError('malformed_message', 'this protocol has text (JSON) messages only');
      const buffer = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
      message = parseSignallingMessage(buffer.toString('utf8'));
    } catch (error) {
      this.fail(error);
      return;
    }
    this.chain = this.chain.then(() => this.handle(message)).catch((error: unknown) => this.fail(error));
  }

  private async handle(message: SignallingClientMessage): Promise<void> {
    if (this.closed) return;
    if (!this.participant) {
      if (message.type === 'join') return this.join(message);
      if (message.type === 'ping') return this.send({ type: 'pong', t: message.t ?? Date.now() });
      throw new SignallingError('not_joined', 'send `join` with a room token first');
    }
    await this.participant.handle(message);
  }

  private join(message: Extract<SignallingClientMessage, { type: 'join' }>): void {
    if (this.roomMismatch(message.room)) throw new SignallingError('auth_failed', 'the room in the message differs from the room in the URL', true);
    let authorized;
    try {
      authorized = this.deps.rooms.authorize(message.room ?? this.deps.roomInUrl, message.token, 'subscriber');
    } catch (error) {
      if (error instanceof RoomError) throw new SignallingError('auth_failed', error.message, true);
      throw error;
    }
    clearTimeout(this.joinTimer);
    clearImmediate(this.joinCheck);
    this.participant = authorized.room.join(authorized.grant.grantId, {
      send: (m) => this.send(m),
      close: (code, reason) => this.close(code === 'normal' ? 1000 : (SIGNALLING_CLOSE_CODES[code] ?? 1000), reason),
    });
    this.deps.log('room_joined', { room: authorized.room.name, participant_id: this.participant.participantId });
  }

  private roomMismatch(room: string | undefined): boolean {
    return room !== undefined && this.deps.roomInUrl !== undefined && room !== this.deps.roomInUrl;
  }

  private withinRate(): boolean {
    const now = Date.now();
    if (now - this.windowStartMs >= 1000) {
      this.windowStartMs = now;
      this.messagesInWindow = 0;
    }
    this.messagesInWindow++;
    return this.messagesInWindow <= this.deps.maxMessagesPerSecond;
  }

  private fail(error: unknown): void {
    const known = error instanceof SignallingError;
    const code: SignallingErrorCode = known ? error.code : 'internal_error';
    const fatal = known ? error.fatal : true;
    if (!known) this.deps.log('room_signalling_fault', { error: error instanceof Error ? error.message : String(error) });
    this.send({ type: 'error', code, message: known ? error.message : 'internal error', fatal });
    if (fatal) this.close(SIGNALLING_CLOSE_CODES[code] ?? 1008, code);
  }

  private send(message: SignallingServerMessage): void {
    if (this.closed || this.ws.readyState !== this.ws.OPEN) return;
    this.ws.send(JSON.stringify(message));
  }

  private close(code: number, reason: string): void {
    if (this.closed) return;
    this.cleanup();
    this.ws.close(code, reason.slice(0, 120));
  }

  private cleanup(): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.joinTimer);
    clearImmediate(this.joinCheck);
    clearImmediate(this.pongCheck);
    this.deps.live.delete(this);
    this.participant?.leave();
    this.participant = null;
  }
}
