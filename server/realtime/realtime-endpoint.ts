/**
 * The /realtime WebSocket: serves the face models to remote clients (the Python and TS clients,
 * the avatar processor in remote mode). One connection = one face session, selected by
 * `config_id` and authenticated with an API key header (never a URL parameter). Every failure a
 * client can cause is answered with a typed error message; nothing a client sends can crash the
 * server or disturb other sessions. Protocol: docs/realtime-protocol.md.
 */
import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer } from 'ws';
import { RealClock, type Clock } from '../../core/clock.ts';
import type { Registry } from '../../core/registry.ts';
import type { FaceModel } from '../../processors/avatar/face-model.ts';
import { REALTIME_LIMITS, type RealtimeErrorCode, type RealtimeLimits } from '../../protocol/realtime.ts';
import { createCapacityGate, defaultFaceSessionLimit, type CapacityGate } from '../capacity/capacity-gate.ts';
import { registerUpgrade } from '../http/upgrades.ts';
import { RealtimeConnection } from './realtime-connection.ts';
import type { AvatarPublisher, RealtimeResolver } from './realtime-types.ts';

export { urlCarriesApiKey } from './realtime-connection.ts';
export { RealtimeConfigError, type AvatarPublisher, type RealtimePrincipal, type RealtimeResolver, type ResolvedFaceConfig } from './realtime-types.ts';

export const REALTIME_ENDPOINT_DEFAULTS = {
  path: '/realtime',
  /**
   * Without a shared capacity gate: concurrent sessions per process before `server_busy`
   * (count only). The server passes its process-wide gate instead (server/capacity).
   */
  maxSessions: defaultFaceSessionLimit(),
  /** Above this many bytes waiting in a socket, frames go out without their image (audio first). */
  maxBufferedBytes: 2 * 1024 * 1024,
  /**
   * Above this many bytes waiting in a socket, the client is not reading (sound alone is 33 KB/s,
   * and every refused message is answered): the connection is ended `slow_consumer`, its slot
   * freed. Without a bound, one client that stops reading grows the process's memory until every
   * session on it dies.
   */
  hardMaxBufferedBytes: 16 * 1024 * 1024,
  /** ws closes connections whose single message exceeds this (code 1009); below it we answer typed errors. */
  hardMaxPayloadBytes: 1024 * 1024,
  /**
   * A connection not ready (`session_ready`) within this long is closed with `internal_error`:
   * the idle timeout only counts from `session_ready`, and a set-up that hangs (a database that
   * does not answer, a face that never opens) must not hold its socket and capacity forever.
   */
  setupTimeoutMs: 60_000,
} as const;

export interface RealtimeEndpointOptions {
  /** Direct WebRTC publishing; without it, `webrtc` requests get a `webrtc_failed` error. */
  readonly publishAvatar?: AvatarPublisher;
  /**
   * Private ranges a client's LiveKit url may resolve to (SVC_LIVEKIT_ALLOWED_RANGES); nothing
   * private by default (the webhook SSRF policy, with its own operator setting).
   */
  readonly livekitAllowedRanges?: readonly string[];
  readonly registry: Registry;
  readonly resolver: RealtimeResolver;
  readonly clock?: Clock;
  readonly path?: string;
  /**
   * The process-wide capacity gate (server/capacity) shared with the Session API's bots: each
   * session holds a lease of weight 1. Without it, a private count-only gate of `maxSessions`.
   */
  readonly capacityGate?: CapacityGate;
  /** Only without `capacityGate`: the session limit (default REALTIME_ENDPOINT_DEFAULTS.maxSessions). */
  readonly maxSessions?: number;
  readonly maxBufferedBytes?: number;
  /** Above this many bytes waiting, the connection is ended `slow_consumer` (default REALTIME_ENDPOINT_DEFAULTS.hardMaxBufferedBytes). */
  readonly hardMaxBufferedBytes?: number;
  /** Close a connection after this long without any client message (default REALTIME_LIMITS.idleTimeoutMs). */
  readonly idleTimeoutMs?: number;
  /** Close a connection not ready within this long (default REALTIME_ENDPOINT_DEFAULTS.setupTimeoutMs). */
  readonly setupTimeoutMs?: number;
  readonly log?: (event: string, details: Record<string, unknown>) => void;
  /**
   * Called for every frame a session emits with how late it was (ms) against its due time
   * (`startedAtMs + ptsMs`): the frame jitter metric (server/metrics, `FaceFrameTiming.realtime`).
   */
  readonly onFrameLateness?: (lateMs: number) => void;
}

export interface RealtimeEndpoint {
  /** Path of the endpoint in the server's upgrade table. */
  readonly path: string;
  /** Serves one upgrade to the endpoint (the upgrade table calls it). */
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void;
  readonly activeSessions: number;
  /** Connections refused before `session_ready` (a fatal error), by error code; for metrics. */
  refusals(): Readonly<Record<string, number>>;
  close(): Promise<void>;
}

/** The endpoint registered on `server`'s upgrade table at its path (servers assembled by hand, tests). */
export function attachRealtime(server: Server, options: RealtimeEndpointOptions): RealtimeEndpoint {
  const endpoint = createRealtimeEndpoint(options);
  const unregister = registerUpgrade(server, endpoint.path, endpoint.handleUpgrade);
  return {
    ...endpoint,
    get activeSessions() {
      return endpoint.activeSessions;
    },
    async close() {
      unregister();
      await endpoint.close();
    },
  };
}

/** The endpoint, to be put in an upgrade table at `path` (default /realtime). */
export function createRealtimeEndpoint(options: RealtimeEndpointOptions): RealtimeEndpoint {
  const path = options.path ?? REALTIME_ENDPOINT_DEFAULTS.path;
  const ownGate = options.capacityGate ? undefined : createCapacityGate({ limit: options.maxSessions ?? REALTIME_ENDPOINT_DEFAULTS.maxSessions, loadCheck: false });
  const gate = options.capacityGate ?? ownGate!;
  const maxBuffered = options.maxBufferedBytes ?? REALTIME_ENDPOINT_DEFAULTS.maxBufferedBytes;
  const clock = options.clock ?? new RealClock();
  const log = options.log ?? (() => undefined);
  const limits: RealtimeLimits = { ...REALTIME_LIMITS, idleTimeoutMs: options.idleTimeoutMs ?? REALTIME_LIMITS.idleTimeoutMs };
  const wss = new WebSocketServer({ noServer: true, maxPayload: REALTIME_ENDPOINT_DEFAULTS.hardMaxPayloadBytes });
  const models = new Map<string, FaceModel>();
  const live = new Set<RealtimeConnection>();
  /** Every connection from its upgrade to its socket's close, those still authenticating included: shutdown ends them all. */
  const connections = new Set<RealtimeConnection>();
  const refusals: Record<string, number> = {};
  const refused = (code: RealtimeErrorCode) => void (refusals[code] = (refusals[code] ?? 0) + 1);

  const modelFor = (slug: string): FaceModel => {
    let model = models.get(slug);
    if (!model) {
      model = options.registry.create<FaceModel>('face', slug, {});
      models.set(slug, model);
    }
    return model;
  };

  const handleUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    wss.handleUpgrade(req, socket, head, (ws) => {
      const connection = new RealtimeConnection(ws, req, url, { resolver: options.resolver, modelFor, clock, maxBuffered, hardMaxBuffered: options.hardMaxBufferedBytes ?? REALTIME_ENDPOINT_DEFAULTS.hardMaxBufferedBytes, log, live, refused, gate, limits, setupTimeoutMs: options.setupTimeoutMs ?? REALTIME_ENDPOINT_DEFAULTS.setupTimeoutMs, publishAvatar: options.publishAvatar, livekitAllowedRanges: options.livekitAllowedRanges ?? [], onFrameLateness: options.onFrameLateness });
      connections.add(connection);
      ws.once('close', () => connections.delete(connection));
      void connection.open();
    });
  };
  return {
    path,
    handleUpgrade,
    get activeSessions() {
      return live.size;
    },
    refusals: () => ({ ...refusals }),
    async close() {
      // Not only the live ones: a connection still authenticating or resolving its config would
      // otherwise open its session after this, and the socket server's close would wait for it.
      for (const c of [...connections]) c.shutdown('server shutting down');
      ownGate?.close();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    },
  };
}
