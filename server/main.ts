import { join } from 'node:path';
import { pino } from 'pino';
import { Registry } from '../core/registry.ts';
import { createServer } from './app.ts';
import { bootstrapDemo, ensureDemoAgent } from './bootstrap-demo.ts';
import { loadDefaultPlugins } from './default-plugins.ts';
import { loadConfigFromEnv } from './env-config.ts';
import { mountRealtime } from './realtime/index.ts';
import { mountRooms } from './rooms/mount.ts';
import { createCapacityGate, loadCheckFromEnv } from './capacity/index.ts';
import { botHostFromEnv, mountEmbeddedSessions } from './sessions/embedded-sessions.ts';
import { BotHost } from './sessions/bot-host.ts';
import { mountWidget } from './widget/index.ts';
import { mountAvatarSessions } from './avatar-sessions/index.ts';
import { mountOperations, Readiness } from './health/index.ts';
import { createFaceFrameTiming, createServerMetrics, metricsAccessFromEnv } from './metrics/metrics.ts';
import { registerUpgrade } from './http/upgrades.ts';
import { servePgliteSocket } from './db/pglite-socket.ts';
import type { FaceModel } from '../processors/avatar/face-model.ts';

/**
 * How long SIGTERM waits for live sessions to end cleanly (`server_shutdown`: the visitor is told,
 * the call recorded, the room closed) before the process exits anyway (docs/operations.md).
 */
const SHUTDOWN = {
  graceMs: 10_000,
  /** Past grace + this, the process exits 1 whatever is still closing (a stuck database, ...). */
  backstopMs: 10_000,
} as const;

function shutdownGraceMs(env: NodeJS.ProcessEnv): number {
  const raw = env.SVC_SHUTDOWN_GRACE_MS?.trim();
  if (!raw) return SHUTDOWN.graceMs;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`SVC_SHUTDOWN_GRACE_MS must be a whole number of milliseconds, got ${JSON.stringify(raw)}`);
  return n;
}

/** `npm start`: the REST API on PORT (default 8080), embedded PGlite unless DATABASE_URL is set. */
const { config, metricsAccess, graceMs, loadCheck, botHost } = (() => {
  try {
    return { config: loadConfigFromEnv(), metricsAccess: metricsAccessFromEnv(), graceMs: shutdownGraceMs(process.env), loadCheck: loadCheckFromEnv(), botHost: botHostFromEnv(process.env) };
  } catch (err) {
    process.stderr.write(`svc server configuration error: ${(err as Error).message}\n`);
    process.exit(1);
  }
})();
// Asynchronous stdout: a request's log line costs no write system call on the request path.
const logDestination = pino.destination({ dest: 1, sync: false });
const logger = pino({ level: config.logLevel, redact: ['req.headers["x-api-key"]'] }, logDestination);
const registry = new Registry();
const plugins = await loadDefaultPlugins(registry, logger);
const server = await createServer(config, { registry, logger }).catch((err: Error) => {
  process.stderr.write(`svc server cannot start: ${err.message}\n`);
  process.exit(1);
});
// The embedded database is shared with the CLI and other local processes over a Unix socket
// (server/db/pglite-socket.ts); without it they would find the directory locked.
const sharedDatabase = config.databaseUrl
  ? null
  : await servePgliteSocket(server.db, join(config.dataDir, 'pglite'), { logger }).catch((err: Error) => {
      logger.warn({ err }, 'the embedded database is not shared: the CLI cannot reach it while this server runs');
      return null;
    });
// The face engine loads once, before anything is admitted (decoder, landmark detector, rig of the
// default face): /readyz reports it (`face_engine`), and the first face session does not pay for
// it. Before the capacity gate exists, so that its load window does not count this start-up work.
const faceEngine = (async () => {
  const source = await registry.create<FaceModel>('face', 'human-portrait').openSource();
  (source as { close?: () => void }).close?.();
})();
await faceEngine.catch(() => undefined);
const rooms = mountRooms(server);
// One capacity gate per process: /realtime face sessions and Session API bots share the cores.
// SVC_CAPACITY_LOAD_CHECK=off admits by count only (tests of other rules, or an operator who
// measured); SVC_CAPACITY_MAX_EVENT_LOOP_LAG_MS moves the lag bound (docs/operations.md, "Overload").
// Its CPU share counts the bot host's CPU too (SVC_BOT_HOST=process: the bots' own process).
let hostCpu: (() => NodeJS.CpuUsage) | undefined;
const capacity = createCapacityGate({
  limit: server.config.maxFaceSessions,
  loadCheck,
  cpuUsage: () => {
    const own = process.cpuUsage();
    const host = hostCpu?.();
    return host ? { user: own.user + host.user, system: own.system + host.system } : own;
  },
});
// Face frames' lateness (jitter) of /realtime sessions and bots, exposed by /metrics.
const frameTiming = createFaceFrameTiming();
// The gate judges overload by them too: frames leaving late are what a saturated machine does to
// the sessions it already runs.
const lateness = (record: (lateMs: number) => void) => (lateMs: number) => {
  record(lateMs);
  capacity.recordFrameLateness(lateMs);
};
const realtime = mountRealtime(server, { publishAvatar: rooms.publishAvatar, capacityGate: capacity, onFrameLateness: lateness(frameTiming.realtime) });
// The Session API's bots run in this process, or in a child process with SVC_BOT_HOST=process.
const sessions = mountEmbeddedSessions(server, rooms, { capacity, shutdownTimeoutMs: graceMs, onFrameLateness: lateness(frameTiming.bot), botHost });
// Our face as the avatar of LiveKit Agents (POST /v1/avatar-sessions): the same gate and frame metrics.
const avatarSessions = mountAvatarSessions(server, { capacity, onFrameLateness: lateness(frameTiming.realtime) });
const sessionRunner = sessions.runner;
if (sessionRunner instanceof BotHost) hostCpu = () => sessionRunner.cpuUsage();
let demoAgentId: string | null = null;
mountWidget(server, { demoAgentId: () => demoAgentId });
// /healthz, /readyz, /metrics; mounted last so that every request is timed.
const readiness = new Readiness({ db: server.db, logger });
readiness.trackFaceEngine(faceEngine);
const metrics = createServerMetrics({
  router: server.router,
  sessions: () => sessions.sessions.stats(),
  realtime: () => ({ live: realtime.activeSessions, refusals: realtime.refusals() }),
  capacity,
  frameTiming,
  jobs: server.services.generationJobs,
  extra: avatarSessions.metrics.metrics,
});
mountOperations(server, { readiness, metrics, access: metricsAccess, logger });
const { url } = await server.listen().catch((err: Error) => {
  process.stderr.write(`svc server cannot listen on ${config.host}:${config.port}: ${err.message}\n`);
  process.exit(1);
});
// The plugins' once-per-process work (the offline engines' worker, WASM and phrase templates), in
// the background: otherwise the first session of the process paid about a second for it before
// its greeting, and stalled the other live sessions meanwhile (plugins/local/warm-up.ts).
void registry.warmUp((plugin, err) => logger.warn({ err, plugin }, 'plugin warm-up failed; its first use pays for it instead'));
const demo = await bootstrapDemo(server.services.organizations, server.services.apiKeys);
demoAgentId = await ensureDemoAgent(server, demo !== null).catch((err: Error) => {
  logger.warn({ err }, 'the demo agent could not be prepared; the demo page has no agent');
  return null;
});

const lines = [
  `svc server listening on ${url}`,
  `  database:   ${config.databaseUrl ? 'PostgreSQL (DATABASE_URL)' : `PGlite in ${config.dataDir}/pglite`}`,
  `  storage:    ${config.storage.driver}`,
  `  jobs:       ${config.jobs.runWorker ? `worker here (${config.jobs.concurrency} at once, ${config.jobs.organizationConcurrency} per organization)` : 'no worker here (SVC_WORKER=off): run npm run worker'}`,
  `  plugins:    ${plugins.join(', ') || '(none)'}`,
  `  REST API:   ${url}/v1`,
  `  OpenAPI:    ${url}/v1/openapi.json`,
  `  Reference:  ${url}/v1/docs`,
  `  Realtime:   ${url.replace(/^http/, 'ws')}/realtime?config_id=svc/human-portrait  (face models; X-API-Key header)`,
  `  WebRTC:     ${url.replace(/^http/, 'ws')}/v1/rooms/signal  (embedded rooms; browser client ${url}/v1/rooms/client.js)`,
  `  Avatars:    POST ${url}/v1/avatar-sessions  (our face in LiveKit Agents rooms; docs/livekit-agents.md)`,
  `  Sessions:   POST ${url}/v1/public/agents/connect  (Session API; bots ${botHost ? `in a bot host process, nice ${botHost.nice}` : 'in this process'})`,
  `  Widget:     ${url}/widget/latest/svc-agent.js  (<svc-agent agent-id="..." core-api-endpoint="${url}">)`,
  `  Demo page:  ${url}/${demoAgentId ? '  (talk to the demo agent in your browser)' : '  (no demo agent: add ?agent_id=<a published agent>)'}`,
  `  Health:     ${url}/healthz, ${url}/readyz;  metrics ${url}/metrics (${metricsAccess.mode === 'off' ? 'off: SVC_METRICS' : metricsAccess.mode === 'token' ? 'Authorization: Bearer SVC_METRICS_TOKEN' : 'public'})`,
];
if (demo) {
  lines.push(
    '',
    `First start: created organization "${demo.organization}" with an API key (shown only this once):`,
    `  ${demo.key}`,
    `Try: curl -H "X-API-Key: ${demo.key}" ${url}/v1/agents`,
  );
}
process.stdout.write(lines.join('\n') + '\n');

/**
 * SIGTERM / SIGINT, in this order: /readyz answers 503 (`shutdown: draining`); new sessions and
 * face connections are refused (connect: `server_busy` "shutting down"; /realtime: HTTP 503);
 * live sessions are ended with `server_shutdown` (each tells its visitor and records its call)
 * and face sessions closed (1001), all given up to SVC_SHUTDOWN_GRACE_MS together; then the
 * rooms, the HTTP server and the database close, and the process exits 0. A second signal
 * exits at once (128 + signal number). Past the grace plus SHUTDOWN.backstopMs: exit 1.
 */
let shuttingDown = false;
const flushLog = () => {
  try {
    logDestination.flushSync();
  } catch {
    // not writable (yet): nothing to flush
  }
};
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (shuttingDown) {
      process.stderr.write(`svc server: second ${signal} during shutdown: exiting now\n`);
      flushLog();
      process.exit(128 + (signal === 'SIGINT' ? 2 : 15));
    }
    shuttingDown = true;
    logger.info({ signal, graceMs }, 'shutting down: unready, refusing new sessions, ending live ones');
    readiness.drain();
    const endingSessions = sessions.close(); // refuses new connects at once, ends live sessions (bounded by graceMs)
    const endingFaces = realtime.close(); // unregisters /realtime and closes its sessions (1001)
    const endingAvatars = avatarSessions.close(); // the avatars leave their LiveKit rooms
    registerUpgrade(server.httpServer, '/realtime', (_req, socket) => {
      const body = JSON.stringify({ code: 'server_busy', message: 'this server is shutting down; retry on another' });
      socket.end(`HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 5\r\nConnection: close\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    });
    const backstop = setTimeout(() => {
      process.stderr.write(`svc server: shutdown still not finished ${graceMs + SHUTDOWN.backstopMs} ms after ${signal}: exiting 1\n`);
      flushLog();
      process.exit(1);
    }, graceMs + SHUTDOWN.backstopMs);
    backstop.unref();
    void Promise.allSettled([endingSessions, endingFaces, endingAvatars])
      .then(() => rooms.close())
      .then(() => sharedDatabase?.close())
      .then(() => server.close())
      .then(() => capacity.close())
      .catch((err: unknown) => logger.error({ err }, 'shutdown step failed'))
      .finally(() => {
        logger.info({ signal }, 'shut down');
        flushLog();
        process.exit(0);
      });
  });
}
