import { pino } from 'pino';
import { Registry } from '../core/registry.ts';
import { createServer } from './app.ts';
import { bootstrapDemo, ensureDemoAgent } from './bootstrap-demo.ts';
import { loadDefaultPlugins } from './default-plugins.ts';
import { loadConfigFromEnv } from './env-config.ts';
import { mountRealtime } from './realtime/index.ts';
import { mountRooms } from './rooms/mount.ts';
import { createCapacityGate } from './capacity/index.ts';
import { mountEmbeddedSessions } from './sessions/embedded-sessions.ts';
import { mountWidget } from './widget/index.ts';

/** `npm start`: the REST API on PORT (default 8080), embedded PGlite unless DATABASE_URL is set. */
const config = (() => {
  try {
    return loadConfigFromEnv();
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
const rooms = mountRooms(server);
// One capacity gate per process: /realtime face sessions and Session API bots share the cores.
const capacity = createCapacityGate({ limit: server.config.maxFaceSessions });
const realtime = mountRealtime(server, { publishAvatar: rooms.publishAvatar, capacityGate: capacity });
const sessions = mountEmbeddedSessions(server, rooms, { capacity });
let demoAgentId: string | null = null;
mountWidget(server, { demoAgentId: () => demoAgentId });
const { url } = await server.listen().catch((err: Error) => {
  process.stderr.write(`svc server cannot listen on ${config.host}:${config.port}: ${err.message}\n`);
  process.exit(1);
});
const demo = await bootstrapDemo(server.services.organizations, server.services.apiKeys);
demoAgentId = await ensureDemoAgent(server, demo !== null).catch((err: Error) => {
  logger.warn({ err }, 'the demo agent could not be prepared; the demo page has no agent');
  return null;
});

const lines = [
  `svc server listening on ${url}`,
  `  database:   ${config.databaseUrl ? 'PostgreSQL (DATABASE_URL)' : `PGlite in ${config.dataDir}/pglite`}`,
  `  storage:    ${config.storage.driver}`,
  `  plugins:    ${plugins.join(', ') || '(none)'}`,
  `  REST API:   ${url}/v1`,
  `  OpenAPI:    ${url}/v1/openapi.json`,
  `  Reference:  ${url}/v1/docs`,
  `  Realtime:   ${url.replace(/^http/, 'ws')}/realtime?config_id=svc/human-portrait  (face models; X-API-Key header)`,
  `  WebRTC:     ${url.replace(/^http/, 'ws')}/v1/rooms/signal  (embedded rooms; browser client ${url}/v1/rooms/client.js)`,
  `  Sessions:   POST ${url}/v1/public/agents/connect  (Session API)`,
  `  Widget:     ${url}/widget/latest/svc-agent.js  (<svc-agent agent-id="..." core-api-endpoint="${url}">)`,
  `  Demo page:  ${url}/${demoAgentId ? '  (talk to the demo agent in your browser)' : '  (no demo agent: add ?agent_id=<a published agent>)'}`,
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

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    // Live sessions end first (each tells its visitor and records its call), then the sockets.
    void sessions
      .close()
      .then(() => realtime.close())
      .then(() => rooms.close())
      .then(() => server.close())
      .finally(() => {
        logDestination.flushSync();
        process.exit(0);
      });
  });
}
