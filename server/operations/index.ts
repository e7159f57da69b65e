/**
 * The operator's endpoints, outside /v1 and without API keys (docs/operations.md):
 *
 * - `GET /healthz`: 200 while the process runs (liveness; also while shutting down);
 * - `GET /readyz`: 200 when every readiness check passes, else 503 naming the failing ones
 *   (readiness.ts);
 * - `GET /metrics`: Prometheus text (server/metrics), as `SVC_METRICS` allows: `off` 404,
 *   `token` 401 without `Authorization: Bearer <SVC_METRICS_TOKEN>`, `public` to anyone.
 *
 * Koa routes like every other (outside /v1, left out of the OpenAPI document). Timing every
 * request is not a route: `requestTiming` is the head of the server's chain (server/http/http-app.ts).
 */
import { timingSafeEqual } from 'node:crypto';
import type { Middleware } from 'koa';
import type { Logger } from 'pino';
import { ApiError } from '../http/api-error.ts';
import type { RouteSpec } from '../http/api-routes.ts';
import type { HttpHost } from '../http/http-app.ts';
import type { MetricsAccess, ServerMetrics } from './metrics.ts';
import type { Readiness } from './readiness.ts';

export { Readiness, READINESS, type ReadinessReport, type CheckName } from './readiness.ts';

export const OPERATIONS_PATHS = { health: '/healthz', ready: '/readyz', metrics: '/metrics' } as const;

export interface MountOperationsOptions {
  readonly readiness: Readiness;
  readonly metrics?: ServerMetrics;
  /** Default `{ mode: 'off' }`. */
  readonly access?: MetricsAccess;
  readonly logger?: Logger;
}

/** The head of the chain: every request the server answers is timed, whoever answers it. */
export function requestTiming(metrics: ServerMetrics): Middleware {
  return (ctx, next) => {
    metrics.observe(ctx.req, ctx.res);
    return next();
  };
}

function bearerMatches(header: string | undefined, token: string): boolean {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
  if (!m) return false;
  const given = Buffer.from(m[1]!);
  const want = Buffer.from(token);
  return given.length === want.length && timingSafeEqual(given, want);
}

const route = (path: string, operationId: string, summary: string): RouteSpec => ({
  method: 'get', path, operationId, summary, tag: 'Operations', auth: 'public', inOpenApi: false, responses: { 200: { description: summary } },
});

export function mountOperations(host: Pick<HttpHost, 'api' | 'rootRouter'>, options: MountOperationsOptions): void {
  const access = options.access ?? { mode: 'off' };
  const { readiness, metrics } = options;
  const noStore = { 'Cache-Control': 'no-store' };

  host.api.add(host.rootRouter, route(OPERATIONS_PATHS.health, 'getHealth', 'Liveness'), async () => ({ status: 200, body: { status: 'alive' }, headers: noStore }));

  host.api.add(host.rootRouter, route(OPERATIONS_PATHS.ready, 'getReadiness', 'Readiness'), async () => {
    const unready = (failing: readonly string[], checks: unknown) => ({ status: 503, body: { status: 'unready', failing, checks }, headers: { ...noStore, 'Retry-After': '5' } });
    try {
      const report = await readiness.check();
      return report.ready ? { status: 200, body: { status: 'ready', checks: report.checks }, headers: noStore } : unready(report.failing, report.checks);
    } catch (err) {
      options.logger?.error({ err }, 'readiness check failed');
      return unready(['internal'], {});
    }
  });

  host.api.add(host.rootRouter, route(OPERATIONS_PATHS.metrics, 'getMetrics', 'Prometheus metrics'), async ({ ctx }) => {
    if (!metrics || access.mode === 'off') throw new ApiError('route_not_found', 'metrics are off on this server (SVC_METRICS, see docs/operations.md)');
    if (access.mode === 'token' && !bearerMatches(ctx.get('authorization') || undefined, access.token)) {
      ctx.set('WWW-Authenticate', 'Bearer realm="metrics"');
      throw new ApiError('unauthorized', 'metrics need Authorization: Bearer <SVC_METRICS_TOKEN>');
    }
    const text = await metrics.scrape();
    ctx.type = metrics.contentType;
    return { status: 200, body: text, headers: noStore };
  });
}
