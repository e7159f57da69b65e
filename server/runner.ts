/**
 * `npm run runner`: a runner of the fleet (docs/deployment.md). It runs the bots of the sessions
 * API processes (`npm start` with SVC_SESSIONS=fleet) place on it, and hosts their embedded rooms:
 * visitors' signalling comes to this process's port, advertised as SVC_RUNNER_PUBLIC_URL. With
 * SVC_LIVEKIT_URL, SVC_LIVEKIT_API_KEY and SVC_LIVEKIT_API_SECRET its bots join rooms on that
 * LiveKit server instead (the runner creates them; visitors connect to LiveKit).
 *
 * Assembled from the server's parts (build-server.ts with the RUNNER surfaces: rooms, health,
 * metrics; the same BotRunner and face opener as inline bots, createInlineBotRunner), plus the
 * runner's sessions (server/fleet/runner-sessions.ts) and the start/release routes the API
 * processes call with SVC_RUNNER_SECRET (server/fleet/runner-routes.ts).
 *
 * Lifecycle: registers `starting`; warms the face engine and the offline engines; `ready` (placed
 * on from then on); SIGTERM / SIGINT: `draining` at once (no new session), the live sessions go on
 * until they end or SVC_RUNNER_DRAIN_TIMEOUT_MS passes (then `server_shutdown`), the registry row
 * is removed and the process exits 0. A second signal exits at once.
 */
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { pino } from 'pino';
import { Registry } from '../core/registry.ts';
import { LiveKitRoomProvider } from '../transports/livekit/livekit-room-provider.ts';
import { EmbeddedRoomProvider } from '../transports/webrtc/room-provider.ts';
import { buildServer, warmEngines, warmFaceEngine } from './build-server.ts';
import { createCapacityGate } from './capacity/capacity-gate.ts';
import { heapGrowthFromEnv, loadConfigFromEnv, runnerLoadBoundFromEnv, runnerSettingsFromEnv, runnerTestBurnFromEnv } from './config/env.ts';
import { RUNNER } from './config/surfaces.ts';
import { loadDefaultPlugins } from './default-plugins.ts';
import { FleetStore } from './fleet/fleet-store.ts';
import { createRunnerMetrics } from './fleet/runner-metrics.ts';
import { mountRunnerRoutes } from './fleet/runner-routes.ts';
import { RunnerSessions } from './fleet/runner-sessions.ts';
import { burnCpu } from './fleet/test-burn.ts';
import { applyHeapGrowth } from './operations/heap-growth.ts';
import { createLogDestination } from './operations/log-destination.ts';
import { createInlineBotRunner } from './sessions/embedded-sessions.ts';
import { SESSION_LEASE, SessionStore } from './sessions/session-store.ts';
import { speechProvidersReport, sttModelOf, sttOptionsOf } from './speech-providers.ts';

/** Past the drain and the shutdown grace plus this, the process exits 1 whatever is still closing. */
const SHUTDOWN_BACKSTOP_MS = 10_000;

const { config, settings, loadBound, burnShare } = (() => {
  try {
    const loaded = { config: loadConfigFromEnv(), settings: runnerSettingsFromEnv(), loadBound: runnerLoadBoundFromEnv(), burnShare: runnerTestBurnFromEnv() };
    // Before the engines warm: the old generation's growth (server/operations/heap-growth.ts).
    applyHeapGrowth(heapGrowthFromEnv());
    return loaded;
  } catch (err) {
    process.stderr.write(`svc runner configuration error: ${(err as Error).message}\n`);
    process.exit(1);
  }
})();
const logDestination = createLogDestination(1);
const runnerId = settings.runnerId ?? `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
const logger = pino({ level: config.logLevel, base: { pid: process.pid, runner: runnerId } }, logDestination);
const registry = new Registry();
const plugins = await loadDefaultPlugins(registry, logger);
const speech = speechProvidersReport(registry, { slug: config.sessions.providers.stt, reason: config.sessions.sttReason ?? 'configured', model: sttModelOf(config.sessions.providers) });
if (speech.error) {
  process.stderr.write(`svc runner configuration error: ${speech.error}\n`);
  process.exit(1);
}

// SVC_RUNNER_TEST_BURN_CPU (tests, benchmarks): this process really busy until SIGUSR2.
if (burnShare > 0) {
  const burn = burnCpu(burnShare);
  process.once('SIGUSR2', () => {
    void burn.stop().then(() => process.stdout.write('svc runner: test CPU burn stopped\n'));
  });
}

// Slots, and the late-frame check, judged by the same gate as a single process's bots.
const capacity = createCapacityGate({ limit: settings.slots, loadCheck: config.capacityLoadCheck });
// The engines warm before the runner says ready: a first visitor never pays for loading them.
const warm = (async () => {
  await warmFaceEngine(registry);
  await warmEngines(registry, logger, { webrtc: true, stt: config.sessions.providers.stt, sttOptions: sttOptionsOf(config.sessions.providers) });
})();
const server = await buildServer(
  { ...config, surfaces: RUNNER, jobs: { ...config.jobs, runWorker: false } },
  { registry, logger, capacity, faceEngine: warm },
).catch((err: Error) => {
  process.stderr.write(`svc runner cannot start: ${err.message}\n`);
  process.exit(1);
});
const signalUrl = `${settings.publicUrl.replace(/^http/, 'ws')}/v1/rooms/signal`;
// With SVC_LIVEKIT_URL (and its key and secret) the runner's bots join rooms it creates on that
// LiveKit server, and visitors connect there; otherwise it hosts embedded rooms on its own port.
const livekit = config.sessions.livekit;
const sessions = new RunnerSessions({
  identity: { runnerId, url: settings.publicUrl, slots: settings.slots },
  store: new SessionStore(server.db, runnerId),
  fleet: new FleetStore(server.db, { leaseMs: SESSION_LEASE.leaseMs }),
  agents: server.services.agents,
  rooms: livekit ? new LiveKitRoomProvider(livekit) : new EmbeddedRoomProvider(server.rooms!.rooms, { signalUrl }),
  runner: createInlineBotRunner(server, server.rooms!, { onFrameLateness: (ms) => capacity.recordFrameLateness(ms) }),
  capacity,
  logger,
  loadBound,
});
for (const metric of createRunnerMetrics(() => sessions.runnerStats())) server.metrics?.registry.registerMetric(metric);
mountRunnerRoutes(server, sessions, settings.secret, logger);
const { url } = await server.listen().catch((err: Error) => {
  process.stderr.write(`svc runner cannot listen on ${config.host}:${config.port}: ${err.message}\n`);
  process.exit(1);
});
await sessions.register().catch((err: Error) => {
  process.stderr.write(`svc runner cannot register in the database: ${err.message}\n`);
  process.exit(1);
});
process.stdout.write(
  [
    `svc runner ${runnerId} listening on ${url}`,
    `  advertised: ${settings.publicUrl}  (start requests from API processes${livekit ? '' : `; visitors' signalling ${signalUrl}`})`,
    `  rooms:      ${livekit ? `LiveKit at ${livekit.url}` : 'embedded (this process)'}`,
    `  slots:      ${settings.slots}; drain timeout ${settings.drainTimeoutMs} ms`,
    `  load bound: CPU share ${loadBound.cpu_share}, late frames ${loadBound.late_frame_share}, event-loop lag ${loadBound.event_loop_lag_ms} ms${burnShare > 0 ? `; TEST: burning ${burnShare} of a core until SIGUSR2` : ''}`,
    `  plugins:    ${plugins.join(', ') || '(none)'}`,
    ...speech.lines,
    `  Health:     ${url}/healthz, ${url}/readyz (ready once warm, unready while draining)`,
  ].join('\n') + '\n',
);
let stopping = false;
const flushLog = () => {
  try {
    logDestination.flushSync();
  } catch {
    // not writable (yet): nothing to flush
  }
};
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (stopping) {
      process.stderr.write(`svc runner: second ${signal} while draining: exiting now\n`);
      flushLog();
      process.exit(128 + (signal === 'SIGINT' ? 2 : 15));
    }
    stopping = true;
    const startedAt = Date.now();
    server.readiness.drain();
    const backstop = setTimeout(() => {
      process.stderr.write(`svc runner: drain still not finished ${settings.drainTimeoutMs + config.shutdownGraceMs + SHUTDOWN_BACKSTOP_MS} ms after ${signal}: exiting 1\n`);
      flushLog();
      process.exit(1);
    }, settings.drainTimeoutMs + config.shutdownGraceMs + SHUTDOWN_BACKSTOP_MS);
    backstop.unref();
    void (async () => {
      await sessions.drain(settings.drainTimeoutMs);
      await sessions.close('server_shutdown');
      await server.close();
      capacity.close();
    })()
      .catch((err: Error) => logger.error({ err }, 'runner shutdown step failed'))
      .finally(() => {
        logger.info({ signal, ms: Date.now() - startedAt }, 'runner drained and stopped');
        process.stdout.write(`svc runner drained and stopped after ${Date.now() - startedAt} ms\n`);
        flushLog();
        process.exit(0);
      });
  });
}

await warm.catch((err: Error) => logger.warn({ err }, 'engine warm-up failed; the first sessions pay for it'));
if (!stopping) {
  await sessions.ready();
  process.stdout.write(`svc runner ready (${settings.slots} slots)\n`);
}

