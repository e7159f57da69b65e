/**
 * The server's one HTTP chain (Koa) and its route table. Every HTTP surface declares its routes
 * the same way, `api.add(router, spec, handler)` (api-routes.ts), on one of two routers: `router`
 * (under /v1) or `rootRouter` (outside it: the demo page, the widget script, /healthz, /readyz,
 * /metrics). The chain, in order:
 *
 *   head (timing: sees every request)  ->  request log  ->  errors in the spec's shape
 *   ->  default headers, CORS of open paths  ->  body media types (415, before any read)
 *   ->  the assembly's own middleware (rate limits, ...)  ->  routes  ->  404 / 405
 *
 * WebSocket upgrades never enter the chain: they go through the server's one upgrade table
 * (upgrades.ts), whose entries `buildServer` declares.
 */
import { createServer as createNodeServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Router from '@koa/router';
import Koa from 'koa';
import type { Logger } from 'pino';
import type { ServerConfig } from '../config/server-config.ts';
import type { ApiKeys } from '../services/api-keys.ts';
import { ApiError } from './api-error.ts';
import { ApiRoutes } from './api-routes.ts';
import { authenticate } from './authenticate.ts';
import { handleClientErrors } from './client-errors.ts';
import { errorMiddleware } from './error-middleware.ts';
import { bodyMediaTypeGuard, matchedRoute } from './json-body.ts';
import { koaHandler } from './koa-handler.ts';
import { requestLog } from './request-log.ts';
import { responseHeaders } from './response-headers.ts';
import { routerDispatch } from './route-dispatch.ts';
import { UpgradeDispatcher } from './upgrades.ts';

/** Where surfaces mount their routes and upgrades. */
export interface HttpHost {
  readonly app: Koa;
  /** Routes under /v1. */
  readonly router: Router;
  /** Routes outside /v1 (the demo page, the widget script, the operator's endpoints). */
  readonly rootRouter: Router;
  /** Declares a route with validation and OpenAPI documentation (`api.add(router, spec, handler)`). */
  readonly api: ApiRoutes;
  readonly httpServer: Server;
  /** The one upgrade table: path -> WebSocket endpoint. */
  readonly upgrades: UpgradeDispatcher;
  /** Middleware authenticating `X-API-Key` (sets `ctx.state.principal`). */
  readonly requireApiKey: Koa.Middleware;
  /** `{base_url}`: publicBaseUrl, else the origin `ctx`'s client used, else the listening address. */
  baseUrl(ctx?: Koa.Context): string;
  /** The route pattern a request is served by (`/v1/agents/:agent_id`), or undefined: metrics labels. */
  routeOf(path: string, method: string): string | undefined;
}

export interface HttpApp extends HttpHost {
  listen(): Promise<{ url: string }>;
  /** Stops accepting, closes every connection. */
  close(): Promise<void>;
}

export interface HttpAppOptions {
  readonly apiKeys: ApiKeys;
  readonly logger: Logger;
  /** Runs first for every request (timing: what must see every request, answered by any route or none). */
  readonly head?: readonly Koa.Middleware[];
  /** After the shared checks, before the routes: per-key rate limits and the like. */
  readonly middleware?: readonly Koa.Middleware[];
  /** Paths whose requests are not logged (health probes every few seconds). */
  readonly quietPaths?: ReadonlySet<string>;
}

export function createHttpApp(config: ServerConfig, options: HttpAppOptions): HttpApp {
  let listeningUrl: string | undefined;
  // `{base_url}`: the configured public address, else the address the client used for this
  // request (signed URLs then work from other machines too), else the listening address. Passed
  // down explicitly: an AsyncLocalStorage would turn on promise hooks for every request (about
  // 40 us of CPU per API request, measured).
  const baseUrl = (ctx?: Koa.Context) =>
    config.publicBaseUrl ?? (ctx?.host ? `${ctx.protocol}://${ctx.host}` : undefined) ?? listeningUrl ?? `http://127.0.0.1:${config.port}`;

  const app = new Koa();
  app.proxy = config.trustProxy; // X-Forwarded-* only from a proxy the operator declared (SVC_TRUST_PROXY)
  app.silent = true;
  const requireApiKey = authenticate(options.apiKeys);
  const api = new ApiRoutes(requireApiKey, config.maxJsonBodyBytes, baseUrl);
  const router = new Router({ prefix: '/v1' });
  const rootRouter = new Router();
  const routers = [rootRouter, router];

  // Routers read their stacks per request: routes declared after this (every surface's) are served.
  for (const head of options.head ?? []) app.use(head);
  app.use(requestLog(options.logger, options.quietPaths));
  app.use(errorMiddleware(options.logger));
  app.use(responseHeaders());
  app.use(bodyMediaTypeGuard(routers, api.bodyRules));
  for (const middleware of options.middleware ?? []) app.use(middleware);
  app.use(routerDispatch(rootRouter));
  app.use(routerDispatch(router));
  app.use(async (ctx, next) => {
    await next();
    if (ctx.status === 404 && ctx.body === undefined) {
      const allowed = [...new Set(routers.flatMap((r) => r.stack.filter((l) => l.match(ctx.path) && l.methods.length).flatMap((l) => l.methods)))];
      if (allowed.length) {
        ctx.set('Allow', allowed.join(', '));
        throw new ApiError('method_not_allowed', `${ctx.method} is not allowed on ${ctx.path}`, { allowed });
      }
      throw new ApiError('route_not_found', `no route ${ctx.method} ${ctx.path}`);
    }
  });

  const httpServer = createNodeServer(
    { headersTimeout: config.headersTimeoutMs, requestTimeout: config.requestTimeoutMs, connectionsCheckingInterval: Math.min(30_000, Math.max(100, Math.floor(config.headersTimeoutMs / 4))) },
    // Koa's handler without its per-request `onFinished` (koa-handler.ts).
    koaHandler(app),
  );
  httpServer.keepAliveTimeout = 65_000;
  // Every upgrade is claimed by an entry of the table, refused, or served as plain HTTP: none is
  // left unanswered holding its socket (see upgrades.ts).
  const upgrades = UpgradeDispatcher.of(httpServer);
  // Malformed HTTP and request timeouts are answered in the error shape, then the socket closed.
  handleClientErrors(httpServer, options.logger);

  return {
    app, router, rootRouter, api, httpServer, upgrades, requireApiKey, baseUrl,
    routeOf: (path, method) => matchedRoute(routers, path, method === 'HEAD' ? 'GET' : method),
    listen() {
      return new Promise((resolve, reject) => {
        httpServer.once('error', reject);
        httpServer.listen(config.port, config.host, () => {
          httpServer.off('error', reject);
          const { port } = httpServer.address() as AddressInfo;
          const host = config.host === '0.0.0.0' || config.host === '::' ? '127.0.0.1' : config.host;
          listeningUrl = `http://${host}:${port}`;
          resolve({ url: baseUrl() });
        });
      });
    },
    async close() {
      if (!httpServer.listening) return;
      await new Promise<void>((resolve) => {
        httpServer.close(() => resolve());
        httpServer.closeAllConnections();
      });
    },
  };
}
