import { createServer as createHttpServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import Router from '@koa/router';
import Koa from 'koa';
import { pino, type Logger } from 'pino';
import { Registry } from '../core/registry.ts';
import { resolveConfig, SERVER_DEFAULTS, type ServerConfig, type ServerConfigInput } from './config.ts';
import { closeDatabase, openDatabase, type Db } from './db/connect.ts';
import { migrateToLatest } from './db/migrate.ts';
import { registerIdleVideoGenerator, sweepStaleWorkDirs } from './generation/idle-video-generator.ts';
import { ApiError } from './http/api-error.ts';
import { ApiRoutes } from './http/api-routes.ts';
import { authenticate } from './http/authenticate.ts';
import { handleClientErrors } from './http/client-errors.ts';
import { errorMiddleware } from './http/error-middleware.ts';
import { bodyMediaTypeGuard } from './http/json-body.ts';
import { requestLog } from './http/request-log.ts';
import { responseHeaders } from './http/response-headers.ts';
import { UpgradeDispatcher } from './http/upgrades.ts';
import { mountAgentRoutes } from './routes/agents.ts';
import { mountAssetRoutes } from './routes/assets.ts';
import { mountDocsRoutes } from './routes/docs.ts';
import { mountModelConfigRoutes } from './routes/model-configs.ts';
import { mountModelVariantRoutes } from './routes/model-variants.ts';
import { mountPublicRoutes } from './routes/public.ts';
import { mountStorageRoutes } from './routes/storage.ts';
import { SecretBox } from './security/secret-box.ts';
import { UrlSigner } from './security/url-signer.ts';
import { AgentCalls } from './services/agent-calls.ts';
import { Agents } from './services/agents.ts';
import { ApiKeys } from './services/api-keys.ts';
import { Assets } from './services/assets.ts';
import { seedCatalogue } from './services/catalogue-seed.ts';
import { GenerationJobs } from './services/generation-jobs.ts';
import type { Services } from './services/index.ts';
import { ModelConfigs } from './services/model-configs.ts';
import { ModelVariants } from './services/model-variants.ts';
import { Organizations } from './services/organizations.ts';
import { createObjectStorage, FilesystemStorage, type ObjectStorage } from './storage/index.ts';
import { checkSharedStorage, unsharedStorageMessage } from './storage/shared-storage-check.ts';

export type ServerInput = ServerConfigInput;

export interface CreateServerOptions {
  /** Registry holding the plugins (face, sts, asset hooks, generators); a fresh one by default. */
  registry?: Registry;
  logger?: Logger;
  /** Middleware at the head of the chain, before logging: the REST guard (server/capacity/rest-guard.ts). */
  guard?: Koa.Middleware;
}

export interface AppServer {
  config: ServerConfig;
  app: Koa;
  /** The /v1 router: mount more routes with `router.post('/public/agents/connect', ...)`. */
  router: Router;
  /** Registers a route with validation and OpenAPI documentation (same machinery as ours). */
  api: ApiRoutes;
  httpServer: Server;
  db: Db;
  storage: ObjectStorage;
  registry: Registry;
  services: Services;
  /** Middleware authenticating `X-API-Key` (sets `ctx.state.principal`). */
  requireApiKey: Koa.Middleware;
  logger: Logger;
  /** `{base_url}`: publicBaseUrl, else the origin `ctx`'s client used, else the listening address. */
  baseUrl(ctx?: Koa.Context): string;
  /** Waits for background work (asset hooks, generation jobs); for tests and shutdown. */
  settled(): Promise<void>;
  listen(): Promise<{ url: string }>;
  close(): Promise<void>;
}

/**
 * Builds the REST server: opens and migrates the database, seeds the catalogue, mounts every
 * resource router under /v1. Nothing listens until `listen()`, so other modules can first
 * mount their routers and register upgrade paths on `httpServer` (`registerUpgrade`, http/upgrades.ts).
 */
export async function createServer(input: ServerInput, options: CreateServerOptions = {}): Promise<AppServer> {
  const config = resolveConfig(input);
  const logger = options.logger ?? pino({ level: config.logLevel, redact: ['req.headers["x-api-key"]', 'req.headers.authorization'] });
  const registry = options.registry ?? new Registry();
  registerIdleVideoGenerator(registry);
  const db = openDatabase({ databaseUrl: config.databaseUrl, pgliteDir: join(config.dataDir, 'pglite'), timeouts: config.database, logger });
  await migrateToLatest(db);

  let listeningUrl: string | undefined;
  // `{base_url}`: the configured public address, else the address the client used for this
  // request (signed URLs then work from other machines too), else the listening address. Passed
  // down explicitly: an AsyncLocalStorage would turn on promise hooks for every request (about
  // 40 us of CPU per API request, measured).
  const baseUrl = (ctx?: Koa.Context) =>
    config.publicBaseUrl ?? (ctx?.host ? `${ctx.protocol}://${ctx.host}` : undefined) ?? listeningUrl ?? `http://127.0.0.1:${config.port}`;
  const storage = createObjectStorage(config.storage, join(config.dataDir, 'objects'), new UrlSigner(config.signingSecret));

  const organizations = new Organizations(db);
  const apiKeys = new ApiKeys(db);
  const assets = new Assets(db, storage, registry, logger, config.signedUrlTtlMs);
  const services: Services = {
    organizations,
    apiKeys,
    modelVariants: new ModelVariants(db),
    modelConfigs: new ModelConfigs(db, { storage, registry, assets, logger }),
    assets,
    agents: new Agents(db, new SecretBox(config.encryptionKey), registry),
    agentCalls: new AgentCalls(db),
    generationJobs: new GenerationJobs(db, registry, assets, storage, logger, config.jobs),
  };
  await seedCatalogue(db, registry, assets);
  if (config.databaseUrl && config.storage.driver === 'filesystem') {
    const report = await checkSharedStorage(db, storage);
    if (report.missing > 0) logger.warn({ ...report }, unsharedStorageMessage(report, config.storage.root ?? join(config.dataDir, 'objects')));
  }
  // Jobs are durable (docs/jobs.md): a worker here unless SVC_WORKER=off; any worker reclaims interrupted ones.
  if (config.jobs.runWorker) services.generationJobs.startWorker();
  const sweepUploads = () => assets.sweepAbandonedUploads(new Date(Date.now() - config.uploadSessionTtlMs));
  await sweepUploads();
  // Leftovers of a crashed process (this one's predecessor, or a sibling sharing the storage):
  // half-assembled objects and idle-video work folders. At start and with the hourly upload sweep.
  const sweepLeftovers = async () => {
    if (storage instanceof FilesystemStorage) await storage.sweepStaleTemporaries().catch((err) => logger.warn({ err }, 'storage temporaries sweep failed'));
    await sweepStaleWorkDirs().catch((err) => logger.warn({ err }, 'generation work folder sweep failed'));
  };
  await sweepLeftovers();
  const sweepTimer = setInterval(() => {
    void sweepUploads().catch((err) => logger.warn({ err }, 'upload sweep failed'));
    void sweepLeftovers();
  }, SERVER_DEFAULTS.uploadSweepIntervalMs);
  sweepTimer.unref();

  const app = new Koa();
  app.proxy = config.trustProxy; // X-Forwarded-* only from a proxy the operator declared (SVC_TRUST_PROXY)
  app.silent = true;
  const requireApiKey = authenticate(apiKeys);
  const api = new ApiRoutes(requireApiKey, config.maxJsonBodyBytes, baseUrl);
  const router = new Router({ prefix: '/v1' });
  mountDocsRoutes(api, router);
  mountModelConfigRoutes(api, router, services);
  mountModelVariantRoutes(api, router, services);
  mountAssetRoutes(api, router, services);
  mountAgentRoutes(api, router, services, registry);
  mountPublicRoutes(api, router, services);
  if (storage instanceof FilesystemStorage) mountStorageRoutes(api, router, storage);

  // Rate-limited and shed requests are refused before anything else runs (a flood costs no log line).
  if (options.guard) app.use(options.guard);
  app.use(requestLog(logger));
  app.use(errorMiddleware(logger));
  app.use(responseHeaders());
  // JSON-only request bodies (415) on every route, also those mounted on `router` directly,
  // unless the route declared another policy (`api.acceptBody`, RouteSpec `acceptsBody`).
  app.use(bodyMediaTypeGuard(router, api.bodyRules));
  // The router reads its stack per request, so routes mounted after createServer() are served too.
  app.use(router.routes());
  app.use(async (ctx, next) => {
    await next();
    if (ctx.status === 404 && ctx.body === undefined) {
      const allowed = router.stack.filter((l) => l.match(ctx.path) && l.methods.length).flatMap((l) => l.methods);
      if (allowed.length) {
        ctx.set('Allow', [...new Set(allowed)].join(', '));
        throw new ApiError('method_not_allowed', `${ctx.method} is not allowed on ${ctx.path}`, { allowed: [...new Set(allowed)] });
      }
      throw new ApiError('route_not_found', `no route ${ctx.method} ${ctx.path}`);
    }
  });

  const httpServer = createHttpServer(
    { headersTimeout: config.headersTimeoutMs, requestTimeout: config.requestTimeoutMs, connectionsCheckingInterval: Math.min(30_000, Math.max(100, Math.floor(config.headersTimeoutMs / 4))) },
    app.callback(),
  );
  httpServer.keepAliveTimeout = 65_000;
  // Every upgrade is claimed by a registered endpoint (`registerUpgrade`), refused, or served as
  // plain HTTP: none is left unanswered holding its socket (see http/upgrades.ts).
  UpgradeDispatcher.of(httpServer);
  // Malformed HTTP and request timeouts are answered in the error shape, then the socket closed.
  handleClientErrors(httpServer, logger);

  return {
    config, app, router, api, httpServer, db, storage, registry, services, requireApiKey, logger, baseUrl,
    async settled() {
      await services.generationJobs.settled();
      await assets.settled();
    },
    listen() {
      return new Promise((resolve, reject) => {
        httpServer.once('error', reject);
        httpServer.listen(config.port, config.host, () => {
          const { port } = httpServer.address() as AddressInfo;
          const host = config.host === '0.0.0.0' || config.host === '::' ? '127.0.0.1' : config.host;
          listeningUrl = `http://${host}:${port}`;
          resolve({ url: baseUrl() });
        });
      });
    },
    async close() {
      clearInterval(sweepTimer);
      await services.generationJobs.close();
      await assets.settled();
      if (httpServer.listening) {
        await new Promise<void>((resolve) => {
          httpServer.close(() => resolve());
          httpServer.closeAllConnections();
        });
      }
      await closeDatabase(db);
    },
  };
}
