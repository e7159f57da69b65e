/**
 * Widget hosting ({cdn_url} = this server): the `<svc-agent>` script at
 * GET /widget/latest/svc-agent.js (short cache, revalidated with its ETag) and
 * GET /widget/<version>/svc-agent.js (immutable), with permissive CORS; beside it, under the same
 * rules, the widget's LiveKit room module (livekit-client.js: clients/web/livekit-transport.ts with
 * LiveKit's browser SDK), which the widget imports only for sessions in LiveKit rooms; and the
 * demo page at GET / embedding the widget for the demo agent. The script is built from
 * clients/web/ with esbuild when the module is mounted (in the background, about 20 ms of esbuild
 * work), the LiveKit module on its first request (about 0.2 s); both are kept in memory, and
 * requests that arrive first wait for the build. docs/widget.md.
 *
 *   mountWidget(server, { demoAgentId: () => demoAgent?.agent_id ?? null });
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AppServer } from '../app.ts';
import { WIDGET_VERSION } from '../../clients/web/version.ts';
import { buildLiveKitModule, buildWidget, type WidgetBundle } from './build.ts';
import { demoPage } from './demo-page.ts';

export { buildLiveKitModule, buildWidget, type WidgetBundle } from './build.ts';
export { WIDGET_VERSION } from '../../clients/web/version.ts';

export const WIDGET_PATHS = {
  latest: '/widget/latest/svc-agent.js',
  versioned: `/widget/${WIDGET_VERSION}/svc-agent.js`,
  /** The LiveKit room module (clients/web/livekit-loader.ts imports the versioned one). */
  liveKitLatest: '/widget/latest/livekit-client.js',
  liveKitVersioned: `/widget/${WIDGET_VERSION}/livekit-client.js`,
  demo: '/',
} as const;

export const WIDGET_CACHE = {
  /** `latest` moves with deployments: caches keep it 5 minutes, then revalidate (ETag, 304). */
  latest: 'public, max-age=300, must-revalidate',
  /** A versioned URL never changes content. */
  versioned: 'public, max-age=31536000, immutable',
} as const;

export interface MountWidgetOptions {
  /** The agent the demo page at / talks to (a published agent whose allowlist admits this server's origin); null: no demo agent. */
  readonly demoAgentId?: () => string | null | Promise<string | null>;
  /** Serve the demo page at / (default true). */
  readonly demoPage?: boolean;
}

export interface MountedWidget {
  /** Resolves with the built script (rejects if the build failed). */
  readonly bundle: () => Promise<WidgetBundle>;
  /** Resolves with the built LiveKit module (built on the first call or request). */
  readonly liveKitBundle: () => Promise<WidgetBundle>;
  readonly paths: typeof WIDGET_PATHS;
  /** The plain Node handler (true when it answered the request), for servers that route themselves. */
  readonly handler: (req: IncomingMessage, res: ServerResponse) => boolean;
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

type WidgetServerParts = Pick<AppServer, 'httpServer' | 'logger' | 'baseUrl'> & { readonly config?: { readonly publicBaseUrl?: string | undefined; readonly trustProxy?: boolean } };

/**
 * Mounts the widget routes on the server's HTTP server. Koa composes its middleware when the
 * server is created, so these routes are a plain Node handler placed in front of Koa's request
 * listener (like the room client script): requests for them never reach Koa, every other
 * request does, unchanged. Call it once, before or after `listen()`.
 */
export function mountWidget(server: WidgetServerParts, options: MountWidgetOptions = {}): MountedWidget {
  /** A build kept in memory once it succeeded; a failed one is logged and tried again by the next request. */
  const memo = (what: string, run: () => Promise<WidgetBundle>) => {
    let built: Promise<WidgetBundle> | null = null;
    return () => {
      built ??= run().catch((err: unknown) => {
        server.logger.error({ err }, `${what} build failed`);
        built = null;
        throw err;
      });
      return built;
    };
  };
  const bundle = memo('widget', () => buildWidget());
  const liveKitBundle = memo('widget LiveKit module', async () => {
    const b = await buildLiveKitModule();
    server.logger.info({ version: b.version, bytes: b.code.length, gzip_bytes: b.gzip.length }, 'widget LiveKit module built');
    return b;
  });
  void bundle()
    .then((b) => server.logger.info({ version: b.version, bytes: b.code.length, gzip_bytes: b.gzip.length }, 'widget built'))
    .catch(() => undefined);

  const handler = (req: IncomingMessage, res: ServerResponse): boolean => {
    const path = (req.url ?? '/').split('?')[0]!;
    const method = req.method ?? 'GET';
    const isRead = method === 'GET' || method === 'HEAD';
    const script =
      path === WIDGET_PATHS.latest || path === WIDGET_PATHS.versioned
        ? { built: bundle, what: 'the widget script', latest: path === WIDGET_PATHS.latest }
        : path === WIDGET_PATHS.liveKitLatest || path === WIDGET_PATHS.liveKitVersioned
          ? { built: liveKitBundle, what: 'the widget LiveKit module', latest: path === WIDGET_PATHS.liveKitLatest }
          : null;
    if (script) {
      if (method === 'OPTIONS') {
        res.writeHead(204, { 'Access-Control-Allow-Origin': '*', 'Access-Control-Allow-Methods': 'GET, HEAD, OPTIONS', 'Access-Control-Max-Age': '600' }).end();
        return true;
      }
      if (!isRead) return false;
      void serveScript(req, res, script.built, script.what, script.latest ? WIDGET_CACHE.latest : WIDGET_CACHE.versioned);
      return true;
    }
    if (options.demoPage !== false && isRead && (path === '/' || path === '/index.html')) {
      void serveDemo(req, res);
      return true;
    }
    return false;
  };

  const serveScript = async (req: IncomingMessage, res: ServerResponse, built: () => Promise<WidgetBundle>, what: string, cache: string) => {
    let b: WidgetBundle;
    try {
      b = await built();
    } catch {
      res.writeHead(500, { 'Content-Type': 'application/json; charset=utf-8', 'Cache-Control': 'private, no-store' });
      res.end(JSON.stringify({ code: 'internal_error', message: `${what} could not be built` }));
      return;
    }
    const headers: Record<string, string> = {
      'Content-Type': 'text/javascript; charset=utf-8',
      'Cache-Control': cache,
      ETag: b.etag,
      Vary: 'Accept-Encoding',
      'Access-Control-Allow-Origin': '*',
      'Cross-Origin-Resource-Policy': 'cross-origin',
      'Timing-Allow-Origin': '*',
      'X-Content-Type-Options': 'nosniff',
      'X-Widget-Version': b.version,
    };
    const match = req.headers['if-none-match'];
    if (match && match.split(',').some((t) => t.trim().replace(/^W\//, '') === b.etag)) {
      res.writeHead(304, headers).end();
      return;
    }
    const gzip = /\bgzip\b/i.test(String(req.headers['accept-encoding'] ?? ''));
    const body = gzip ? b.gzip : b.code;
    if (gzip) headers['Content-Encoding'] = 'gzip';
    headers['Content-Length'] = String(body.length);
    res.writeHead(200, headers);
    res.end(req.method === 'HEAD' ? undefined : body);
  };

  const serveDemo = async (req: IncomingMessage, res: ServerResponse) => {
    const query = new URL(req.url ?? '/', 'http://localhost').searchParams.get('agent_id');
    let agentId: string | null = query && UUID_RE.test(query) ? query : null;
    if (!agentId) {
      try {
        agentId = (await options.demoAgentId?.()) ?? null;
      } catch (err) {
        server.logger.warn({ err }, 'demo agent lookup failed');
      }
    }
    const body = demoPage({ agentId: agentId && UUID_RE.test(agentId) ? agentId : null, baseUrl: baseUrlOf(req), scriptPath: WIDGET_PATHS.latest });
    res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8', 'Cache-Control': 'private, no-store', 'Content-Length': String(Buffer.byteLength(body)) });
    res.end(req.method === 'HEAD' ? undefined : body);
  };

  /**
   * {base_url} as the visitor reached it, like the REST API's: the configured public address wins;
   * X-Forwarded-Host/-Proto count only when the operator declared a proxy (`trustProxy`).
   */
  const baseUrlOf = (req: IncomingMessage): string => {
    if (server.config?.publicBaseUrl) return server.config.publicBaseUrl;
    const first = (v: string | string[] | undefined) => (server.config?.trustProxy ? (Array.isArray(v) ? v[0] : v)?.split(',')[0]?.trim() : undefined);
    const host = first(req.headers['x-forwarded-host']) ?? req.headers.host;
    const proto = first(req.headers['x-forwarded-proto']) ?? ((req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http');
    return host && /^[A-Za-z0-9.\-:[\]]+$/.test(host) ? `${proto === 'https' ? 'https' : 'http'}://${host}` : server.baseUrl();
  };

  const http = server.httpServer;
  const previous = http.listeners('request') as ((req: IncomingMessage, res: ServerResponse) => void)[];
  http.removeAllListeners('request');
  http.on('request', (req: IncomingMessage, res: ServerResponse) => {
    if (handler(req, res)) return;
    for (const listener of previous) listener.call(http, req, res);
  });
  return { bundle, liveKitBundle, paths: WIDGET_PATHS, handler };
}
