/**
 * One server, assembled from one typed configuration (config/server-config.ts): the services
 * below (database, storage, jobs), one HTTP chain with every route declared the same way
 * (http/http-app.ts), one upgrade table, and the surfaces the configuration chooses
 * (config/surfaces.ts): REST with its docs, the Session API with its bots, /realtime, the
 * embedded rooms and their signalling, the widget and demo page, health and metrics.
 * `main.ts` (npm start), the test harnesses and the benchmarks are its callers; another role
 * (the fleet's runner, an API-only process) is another choice of surfaces and parts, not new
 * wiring. Where each URL goes: server/README.md.
 *
 * What a caller may bring instead of the defaults (`ServerParts`): the plugin registry, the
 * logger, the capacity gate, middleware before the routes (per-key rate limits), the session
 * runner, and the surfaces' own options.
 */
import { join } from 'node:path';
import type Koa from 'koa';
import { pino, type Logger } from 'pino';
import { wrtcWithSources } from '../transports/webrtc/wrtc.ts';
import { Registry } from '../core/registry.ts';
import type { FaceModel } from '../processors/avatar/face-model.ts';
import { availableParallelism } from 'node:os';
import { createCapacityGate, type CapacityGate } from './capacity/capacity-gate.ts';
import { LoadMeter } from './capacity/load-meter.ts';
import { createRestGuard } from './capacity/rest-guard.ts';
import { resolveConfig, type ServerConfig, type ServerConfigInput } from './config/server-config.ts';
import { REST_ONLY } from './config/surfaces.ts';
import { servePgliteSocket, type PgliteSocketServer } from './db/pglite-socket.ts';
import { ApiError } from './http/api-error.ts';
import { createHttpApp, type HttpHost } from './http/http-app.ts';
import { answerAndDestroy } from './http/raw-response.ts';
import { mountOperations, OPERATIONS_PATHS, Readiness, requestTiming } from './operations/index.ts';
import { createAdmissionTiming, createFaceFrameTiming, createServerMetrics, type ServerMetrics } from './operations/metrics.ts';
import { mountRealtime, type MountRealtimeOptions, type RealtimeEndpoint } from './realtime/index.ts';
import { mountRestRoutes } from './rest/index.ts';
import { mountRooms, type MountedRooms, type MountRoomsOptions } from './rooms/mount.ts';
import { openServices, type ServiceCore } from './services/open-services.ts';
import type { STTService } from '../processors/services.ts';
import { mountFleetSessions, type FleetSessions } from './fleet/fleet-sessions.ts';
import { BotHost } from './sessions/bot-host.ts';
import { mountEmbeddedSessions, type EmbeddedSessions, type EmbeddedSessionsOptions } from './sessions/embedded-sessions.ts';
import { mountWidget, type MountedWidget, type MountWidgetOptions } from './widget/index.ts';
import { createAvatarSessionMetrics, mountAvatarSessions, type MountedAvatarSessions } from './avatar-sessions/index.ts';

export interface ServerParts {
  /** Registry holding the plugins (face, sts, asset hooks, generators); a fresh one by default. */
  readonly registry?: Registry;
  readonly logger?: Logger;
  /**
   * The process-wide capacity gate shared by /realtime face sessions and bots; default: one from
   * the configuration (`maxFaceSessions`, `capacityLoadCheck`), closed with the server. A gate
   * brought here is the caller's to close.
   */
  readonly capacity?: CapacityGate;
  /** Koa middleware after the shared checks and before the routes (per-key rate limits, ...). */
  readonly middleware?: readonly Koa.Middleware[];
  /** The Session API's options: the session runner (`sessionRunner`), engines, runner tuning, lease. */
  readonly sessions?: EmbeddedSessionsOptions;
  readonly rooms?: MountRoomsOptions;
  readonly realtime?: Omit<MountRealtimeOptions, 'capacityGate' | 'publishAvatar' | 'onFrameLateness'>;
  readonly widget?: Omit<MountWidgetOptions, 'connectOrigins'>;
  /** The avatar sessions' options (time limits, a test's TLS authority). */
  readonly avatarSessions?: Omit<Parameters<typeof mountAvatarSessions>[1], 'capacity' | 'onFrameLateness' | 'metrics'>;
  /**
   * The face engine's warm-up, reported by /readyz (not waited for); default: the registry's
   * human-portrait face opened once, waited for before the server is built.
   */
  readonly faceEngine?: Promise<unknown>;
  /**
   * On the embedded database, whether `listen()` shares it over its Unix socket with the CLI and
   * other local processes (db/pglite-socket.ts); default true. A program that embeds the server
   * and keeps its database to itself passes false: the CLI then finds the directory in use.
   */
  readonly shareEmbeddedDatabase?: boolean;
}

/** A server as `buildServer` assembled it; the surfaces not chosen are absent. */
export interface AppServer extends ServiceCore, HttpHost {
  /** Present where face sessions or bots run (the sessions or realtime surface), or when brought. */
  readonly capacity?: CapacityGate;
  readonly readiness: Readiness;
  readonly metrics?: ServerMetrics;
  readonly rooms?: MountedRooms;
  readonly realtime?: RealtimeEndpoint;
  readonly sessions?: EmbeddedSessions;
  /** The Session API of a fleet's API process (`config.sessions.fleet`): placement on runners, instead of `sessions`. */
  readonly fleet?: FleetSessions;
  readonly widget?: MountedWidget;
  readonly avatarSessions?: MountedAvatarSessions;
  listen(): Promise<{ url: string }>;
  /**
   * In this order: /readyz unready; new sessions and face connections refused (connect:
   * `server_busy`; /realtime: 503); live sessions ended `server_shutdown` and face sessions closed,
   * bounded by `config.shutdownGraceMs`; then the rooms, the HTTP server, jobs and database.
   */
  close(): Promise<void>;
}

/** The operator's probes are not logged (one every few seconds, forever). */
const QUIET_PATHS: ReadonlySet<string> = new Set(Object.values(OPERATIONS_PATHS));

export async function buildServer(input: ServerConfigInput | ServerConfig, parts: ServerParts = {}): Promise<AppServer> {
  const config = resolveConfig(input);
  const { surfaces } = config;
  const logger = parts.logger ?? pino({ level: config.logLevel, redact: ['req.headers["x-api-key"]', 'req.headers.authorization'] });
  const registry = parts.registry ?? new Registry();
  const core = await openServices(config, registry, logger);

  // The face engine loads once, before anything is admitted (decoder, landmark detector, rig of
  // the default face): /readyz reports it, and the first face session does not pay for it.
  // Before the capacity gate exists, so that its load window does not count this start-up work.
  const faceEngine = parts.faceEngine ?? (surfaces.sessions || surfaces.realtime ? warmFaceEngine(registry) : Promise.resolve());
  if (!parts.faceEngine) await faceEngine.catch(() => undefined);
  // One load meter per process, read by the capacity gate (bots and face sessions: slots and their
  // frames' lateness) and the REST guard (per-key rate limits; the API sheds its own load first).
  // Its CPU share counts the bot host's CPU too (SVC_BOT_HOST=process: the bots' own process).
  let hostCpu: (() => NodeJS.CpuUsage) | undefined;
  const meter = parts.capacity?.meter ?? new LoadMeter({
    cores: availableParallelism(),
    cpuUsage: () => {
      const own = process.cpuUsage();
      const host = hostCpu?.();
      return host ? { user: own.user + host.user, system: own.system + host.system } : own;
    },
  });
  // Only where face sessions or bots run: a REST-only process admits no face.
  const capacity = parts.capacity ?? (surfaces.sessions || surfaces.realtime || surfaces.avatarSessions ? createCapacityGate({ limit: config.maxFaceSessions, loadCheck: config.capacityLoadCheck, meter }) : undefined);
  const restGuard = surfaces.rest ? createRestGuard({ meter, liveSessions: () => capacity?.inUse ?? 0, ...config.restGuard }) : undefined;
  const admissionTiming = createAdmissionTiming();
  // Face frames' lateness (jitter) of /realtime sessions and bots: exposed by /metrics, and judged
  // by the gate (frames leaving late are what a saturated machine does to the sessions it runs).
  const frameTiming = createFaceFrameTiming();
  const lateness = (record: (lateMs: number) => void) => (lateMs: number) => {
    record(lateMs);
    capacity?.recordFrameLateness(lateMs);
  };

  const live: { sessions?: EmbeddedSessions; fleet?: FleetSessions; realtime?: RealtimeEndpoint; avatarSessions?: MountedAvatarSessions; routeOf?: (path: string, method: string) => string | undefined } = {};
  const avatarMetrics = surfaces.avatarSessions && capacity ? createAvatarSessionMetrics(() => live.avatarSessions?.sessions.live ?? 0) : undefined;
  const metrics = surfaces.operations
    ? createServerMetrics({
        routeOf: (path, method) => live.routeOf?.(path, method),
        ...(surfaces.sessions ? { sessions: () => (live.sessions ? live.sessions.sessions.stats() : live.fleet!.stats()) } : {}),
        ...(surfaces.realtime ? { realtime: () => ({ live: live.realtime!.activeSessions, refusals: live.realtime!.refusals() }) } : {}),
        ...(capacity ? { capacity } : {}),
        frameTiming,
        admissionTiming,
        ...(restGuard ? { restGuard } : {}),
        jobs: core.services.generationJobs,
        ...(avatarMetrics ? { extra: avatarMetrics.metrics } : {}),
      })
    : undefined;
  const http = createHttpApp(config, { apiKeys: core.services.apiKeys, logger, head: [...(metrics ? [requestTiming(metrics)] : []), ...(restGuard ? [restGuard.middleware] : [])], middleware: parts.middleware ?? [], quietPaths: QUIET_PATHS });
  live.routeOf = http.routeOf;
  const host = { ...core, ...http };

  if (surfaces.rest) mountRestRoutes(http, core);
  const rooms = surfaces.rooms ? mountRooms(host, parts.rooms) : undefined;
  const realtime = surfaces.realtime
    ? mountRealtime(core, { ...parts.realtime, ...(capacity ? { capacityGate: capacity } : {}), ...(rooms ? { publishAvatar: rooms.publishAvatar } : {}), onFrameLateness: lateness(frameTiming.realtime) })
    : undefined;
  // The Session API's bots run in this process, or in a child process with SVC_BOT_HOST=process,
  // or on the fleet's runners (SVC_SESSIONS=fleet: this process admits and places).
  const fleet = surfaces.sessions && config.sessions.fleet
    ? mountFleetSessions(host, config.sessions.fleet, { ...(parts.sessions?.lease ? { lease: parts.sessions.lease } : {}), onDecision: admissionTiming.record })
    : undefined;
  const sessions = surfaces.sessions && !fleet
    ? mountEmbeddedSessions(host, rooms!, { ...(capacity ? { capacity } : {}), shutdownTimeoutMs: config.shutdownGraceMs, onFrameLateness: lateness(frameTiming.bot), onDecision: admissionTiming.record, ...parts.sessions })
    : undefined;
  const runner = sessions?.runner;
  if (runner instanceof BotHost) hostCpu = () => runner.cpuUsage();
  // Our face as the avatar of LiveKit Agents: the same gate and frame metrics as /realtime.
  const avatarSessions = surfaces.avatarSessions && capacity ? mountAvatarSessions(host, { capacity, metrics: avatarMetrics!, onFrameLateness: lateness(frameTiming.realtime), ...parts.avatarSessions }) : undefined;
  const widget = surfaces.widget ? mountWidget(host, { archive: core.storage, liveKitRooms: Boolean(config.sessions.livekit), ...parts.widget, connectOrigins: config.sessions.livekit ? [config.sessions.livekit.url] : [] }) : undefined;
  const readiness = new Readiness({ db: core.db, logger });
  readiness.trackFaceEngine(faceEngine);
  if (surfaces.operations) mountOperations(http, { readiness, ...(metrics ? { metrics } : {}), access: config.metrics, logger });
  Object.assign(live, { sessions, fleet, realtime, avatarSessions });

  // The upgrade table: every WebSocket endpoint of this server.
  if (realtime) http.upgrades.register(realtime.path, realtime.handleUpgrade);
  if (rooms) http.upgrades.register(rooms.signalling.path, rooms.signalling.handleUpgrade);

  let sharedDatabase: PgliteSocketServer | null = null;
  let closing: Promise<void> | undefined;
  const step = async (what: string, work: () => Promise<unknown> | unknown) => {
    try {
      await work();
    } catch (err) {
      logger.error({ err }, `shutdown step failed: ${what}`);
    }
  };
  return {
    ...host,
    capacity, readiness, metrics, rooms, realtime, sessions, fleet, widget, avatarSessions,
    async listen() {
      // The embedded database is shared with the CLI and other local processes over a Unix
      // socket (db/pglite-socket.ts); without it they would find the directory locked.
      if (!config.databaseUrl && !sharedDatabase && parts.shareEmbeddedDatabase !== false) {
        sharedDatabase = await servePgliteSocket(core.db, join(config.dataDir, 'pglite'), { logger }).catch((err: Error) => {
          logger.warn({ err }, 'the embedded database is not shared: the CLI cannot reach it while this server runs');
          return null;
        });
      }
      return http.listen();
    },
    close() {
      closing ??= (async () => {
        readiness.drain();
        const ending = Promise.allSettled([sessions?.close(), fleet?.close(config.shutdownGraceMs), realtime?.close(), avatarSessions?.close()]);
        if (realtime) http.upgrades.replace(realtime.path, (_req, socket) => answerAndDestroy(socket, new ApiError('server_busy', 'this server is shutting down; retry on another'), { 'Retry-After': '5' }));
        await ending;
        await step('rooms', () => rooms?.close());
        await step('shared database socket', () => sharedDatabase?.close());
        await step('http', () => http.close());
        await step('services', () => core.close());
        if (!parts.capacity) {
          capacity?.close();
          meter.close();
        }
      })();
      return closing;
    },
  };
}

/** The REST API alone (model configurations, assets, agents, docs): `buildServer` with `REST_ONLY` surfaces. */
export function createServer(input: ServerConfigInput, parts: ServerParts = {}): Promise<AppServer> {
  return buildServer({ ...input, surfaces: { ...REST_ONLY, ...input.surfaces } }, parts);
}

export type ServerInput = ServerConfigInput;
export type CreateServerOptions = ServerParts;

/** Opens (and closes) the default face once, so its engine is loaded before the first session. */
export async function warmFaceEngine(registry: Registry): Promise<void> {
  if (!registry.has('face', 'human-portrait')) return;
  const source = await registry.create<FaceModel>('face', 'human-portrait').openSource();
  (source as { close?: () => void }).close?.();
}

/**
 * The once-per-process work after the face (`npm start` runs it after listening, a runner before
 * it says ready): the plugins' warm-up (the offline engines' worker, WASM and phrase templates),
 * then the WebRTC library of embedded rooms (its native module took 60 ms to load inside the
 * first bot start). Failures are logged; the first use pays for them instead. Never throws.
 */
export async function warmEngines(registry: Registry, logger: Logger, options: { readonly webrtc: boolean; readonly stt?: string; readonly sttOptions?: Readonly<Record<string, unknown>> | undefined }): Promise<void> {
  await registry.warmUp((plugin, err) => logger.warn({ err, plugin }, 'plugin warm-up failed; its first use pays for it instead'));
  // The deployment's speech-to-text, when it has a model to load (stt:moonshine: 0.3-2 s, once).
  if (options.stt && registry.has('stt', options.stt)) {
    try {
      const stt = registry.create<STTService & { warmUp?: () => Promise<void> }>('stt', options.stt, options.sttOptions ? { ...options.sttOptions } : undefined);
      await stt.warmUp?.();
    } catch (err) {
      logger.warn({ err, stt: options.stt }, 'speech-to-text warm-up failed; its first session pays for it instead');
    }
  }
  if (!options.webrtc) return;
  try {
    wrtcWithSources();
  } catch (err) {
    logger.warn({ err }, 'the WebRTC library could not be loaded; the first embedded room will say why');
  }
}
