/**
 * `npm start`: read the configuration (config/env.ts), build the server (build-server.ts), listen,
 * and handle the signals. Embedded PGlite unless DATABASE_URL is set; every surface.
 */
import { pino } from 'pino';
import { Registry } from '../core/registry.ts';
import { bootstrapDemo, ensureDemoAgent } from './bootstrap-demo.ts';
import { buildServer, warmEngines } from './build-server.ts';
import { heapGrowthFromEnv, loadConfigFromEnv } from './config/env.ts';
import { loadDefaultPlugins } from './default-plugins.ts';
import { applyHeapGrowth } from './operations/heap-growth.ts';
import { createLogDestination } from './operations/log-destination.ts';
import { speechProvidersReport, sttModelOf, sttOptionsOf } from './speech-providers.ts';

/** Past the shutdown grace plus this, the process exits 1 whatever is still closing (a stuck database, ...). */
const SHUTDOWN_BACKSTOP_MS = 10_000;

const config = (() => {
  try {
    const loaded = loadConfigFromEnv();
    // Before the first session: the old generation's growth (server/operations/heap-growth.ts).
    applyHeapGrowth(heapGrowthFromEnv());
    return loaded;
  } catch (err) {
    process.stderr.write(`svc server configuration error: ${(err as Error).message}\n`);
    process.exit(1);
  }
})();
// Asynchronous, batched stdout: a request's log line costs no write system call on the request path.
const logDestination = createLogDestination(1);
const logger = pino({ level: config.logLevel, redact: ['req.headers["x-api-key"]'] }, logDestination);
const registry = new Registry();
const plugins = await loadDefaultPlugins(registry, logger);
// The speech providers, checked before anything listens: an unknown SVC_STT_PROVIDER stops here.
const speech = speechProvidersReport(registry, { slug: config.sessions.providers.stt, reason: config.sessions.sttReason ?? 'configured', model: sttModelOf(config.sessions.providers) });
if (speech.error) {
  process.stderr.write(`svc server configuration error: ${speech.error}\n`);
  process.exit(1);
}
let demoAgentId: string | null = null;
const server = await buildServer(config, { registry, logger, widget: { demoAgentId: () => demoAgentId } }).catch((err: Error) => {
  process.stderr.write(`svc server cannot start: ${err.message}\n`);
  process.exit(1);
});
const { url } = await server.listen().catch((err: Error) => {
  process.stderr.write(`svc server cannot listen on ${config.host}:${config.port}: ${err.message}\n`);
  process.exit(1);
});
// The plugins' once-per-process work (the offline engines' worker, WASM and phrase templates), in
// the background: otherwise the first session of the process paid about a second for it before
// its greeting, and stalled the other live sessions meanwhile (plugins/local/warm-up.ts). The
// WebRTC library of embedded rooms too (its native module took 60 ms to load, inside the first
// bot start). /readyz says `engines: loading` until it is done.
server.readiness.trackEngines(warmEngines(registry, logger, { webrtc: server.rooms !== undefined, stt: config.sessions.providers.stt, sttOptions: sttOptionsOf(config.sessions.providers) }));
const demo = await bootstrapDemo(server.services.organizations, server.services.apiKeys);
demoAgentId = await ensureDemoAgent(server, demo !== null).catch((err: Error) => {
  logger.warn({ err }, 'the demo agent could not be prepared; the demo page has no agent');
  return null;
});

const socketUrl = url.replace(/^http/, 'ws');
const metricsAccess = config.metrics.mode === 'off' ? 'off: SVC_METRICS' : config.metrics.mode === 'token' ? 'Authorization: Bearer SVC_METRICS_TOKEN' : 'public';
const lines = [
  `svc server listening on ${url}`,
  `  database:   ${config.databaseUrl ? 'PostgreSQL (DATABASE_URL)' : `PGlite in ${config.dataDir}/pglite`}`,
  `  storage:    ${config.storage.driver}`,
  `  jobs:       ${config.jobs.runWorker ? `worker here (${config.jobs.concurrency} at once, ${config.jobs.organizationConcurrency} per organization)` : 'no worker here (SVC_WORKER=off): run npm run worker'}`,
  `  plugins:    ${plugins.join(', ') || '(none)'}`,
  `  REST API:   ${url}/v1`,
  `  OpenAPI:    ${url}/v1/openapi.json`,
  `  Reference:  ${url}/v1/docs`,
  `  Realtime:   ${socketUrl}/realtime?config_id=svc/human-portrait  (face models; X-API-Key header)`,
  `  WebRTC:     ${socketUrl}/v1/rooms/signal  (embedded rooms; browser client ${url}/v1/rooms/client.js)`,
  `  Sessions:   POST ${url}/v1/public/agents/connect  (Session API; bots ${config.sessions.fleet ? 'on the fleet\'s runners, SVC_SESSIONS=fleet' : config.sessions.botHost ? `in a bot host process, nice ${config.sessions.botHost.nice}` : 'in this process'})`,
  ...speech.lines,
  `  Widget:     ${url}/widget/latest/svc-agent.js  (<svc-agent agent-id="..." core-api-endpoint="${url}">)`,
  `  Demo page:  ${url}/${demoAgentId ? '  (talk to the demo agent in your browser)' : '  (no demo agent: add ?agent_id=<a published agent>)'}`,
  `  Health:     ${url}/healthz, ${url}/readyz;  metrics ${url}/metrics (${metricsAccess})`,
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
 * SIGTERM / SIGINT: `server.close()` (unready, refuse new sessions, end live ones within
 * SVC_SHUTDOWN_GRACE_MS, then close the rooms, HTTP and the database), and exit 0. A second
 * signal exits at once (128 + signal number); past the grace plus the backstop: exit 1.
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
    logger.info({ signal, graceMs: config.shutdownGraceMs }, 'shutting down: unready, refusing new sessions, ending live ones');
    const backstop = setTimeout(() => {
      process.stderr.write(`svc server: shutdown still not finished ${config.shutdownGraceMs + SHUTDOWN_BACKSTOP_MS} ms after ${signal}: exiting 1\n`);
      flushLog();
      process.exit(1);
    }, config.shutdownGraceMs + SHUTDOWN_BACKSTOP_MS);
    backstop.unref();
    void server.close().finally(() => {
      logger.info({ signal }, 'shut down');
      flushLog();
      process.exit(0);
    });
  });
}
