/**
 * The operator's endpoints, outside /v1 and without API keys (docs/operations.md):
 *
 * - `GET /healthz`: 200 while the process runs (liveness; also while shutting down);
 * - `GET /readyz`: 200 when every readiness check passes, else 503 naming the failing ones
 *   (readiness.ts);
 * - `GET /metrics`: Prometheus text (server/metrics), as `SVC_METRICS` allows: `off` 404,
 *   `token` 401 without `Authorization: Bearer <SVC_METRICS_TOKEN>`, `public` to anyone.
 *
 * Like the widget, a plain Node handler placed in front of the server's request listeners (Koa
 * composed its middleware when the server was created). Mounted last, it also times every
 * request the server answers (metrics `observe`), whoever answers it.
 */
import { timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
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

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': Buffer.byteLength(text), 'Cache-Control': 'no-store', ...headers });
  res.end(res.req?.method === 'HEAD' ? undefined : text);
}

function bearerMatches(header: string | undefined, token: string): boolean {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
  if (!m) return false;
  const given = Buffer.from(m[1]!);
  const want = Buffer.from(token);
  return given.length === want.length && timingSafeEqual(given, want);
}

export function mountOperations(server: { readonly httpServer: Server }, options: MountOperationsOptions): { close(): void } {
  const access = options.access ?? { mode: 'off' };
  const { readiness, metrics } = options;

  const handle = (req: IncomingMessage, res: ServerResponse): boolean => {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    if (path !== OPERATIONS_PATHS.health && path !== OPERATIONS_PATHS.ready && path !== OPERATIONS_PATHS.metrics) return false;
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      json(res, 405, { code: 'method_not_allowed', message: `${req.method} is not allowed on ${path}` }, { Allow: 'GET, HEAD' });
      return true;
    }
    if (path === OPERATIONS_PATHS.health) {
      json(res, 200, { status: 'alive' });
      return true;
    }
    if (path === OPERATIONS_PATHS.ready) {
      readiness.check().then(
        (report) =>
          report.ready
            ? json(res, 200, { status: 'ready', checks: report.checks })
            : json(res, 503, { status: 'unready', failing: report.failing, checks: report.checks }, { 'Retry-After': '5' }),
        (err: unknown) => {
          options.logger?.error({ err }, 'readiness check failed');
          json(res, 503, { status: 'unready', failing: ['internal'], checks: {} }, { 'Retry-After': '5' });
        },
      );
      return true;
    }
    if (!metrics || access.mode === 'off') {
      json(res, 404, { code: 'route_not_found', message: 'metrics are off on this server (SVC_METRICS, see docs/operations.md)' });
      return true;
    }
    if (access.mode === 'token' && !bearerMatches(req.headers.authorization, access.token)) {
      json(res, 401, { code: 'unauthorized', message: 'metrics need Authorization: Bearer <SVC_METRICS_TOKEN>' }, { 'WWW-Authenticate': 'Bearer realm="metrics"' });
      return true;
    }
    metrics.scrape().then(
      (text) => {
        res.writeHead(200, { 'Content-Type': metrics.contentType, 'Cache-Control': 'no-store', 'Content-Length': Buffer.byteLength(text) });
        res.end(req.method === 'HEAD' ? undefined : text);
      },
      (err: unknown) => {
        options.logger?.error({ err }, 'metrics scrape failed');
        json(res, 500, { code: 'internal_error', message: 'internal server error' });
      },
    );
    return true;
  };

  const http = server.httpServer;
  const previous = http.listeners('request') as ((req: IncomingMessage, res: ServerResponse) => void)[];
  const listener = (req: IncomingMessage, res: ServerResponse) => {
    metrics?.observe(req, res);
    if (handle(req, res)) return;
    for (const l of previous) l.call(http, req, res);
  };
  http.removeAllListeners('request');
  http.on('request', listener);
  return {
    close() {
      // Gives the server its previous listeners back (tests that mount and unmount).
      if (!http.listeners('request').includes(listener)) return;
      http.removeListener('request', listener);
      for (const l of previous) http.on('request', l);
    },
  };
}
