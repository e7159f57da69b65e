/**
 * Widget hosting ({cdn_url} = this server): the `<svc-agent>` script at
 * GET /widget/latest/svc-agent.js (short cache, revalidated with its ETag) and
 * GET /widget/<version>/svc-agent.js (immutable), with permissive CORS; beside it, under the same
 * rules, the widget's LiveKit room module (livekit-client.js: clients/web/livekit-transport.ts with
 * LiveKit's browser SDK), which the widget imports only for sessions in LiveKit rooms; and the
 * demo page at GET / embedding the widget for the demo agent. The script is built from
 * clients/web/ with esbuild when the module is mounted (in the background, about 20 ms of esbuild
 * work), the LiveKit module on its first request (about 0.2 s); both are kept in memory, and
 * requests that arrive first wait for the build. Koa routes like every other (outside /v1, left
 * out of the OpenAPI document). docs/widget.md.
 *
 *   mountWidget(host, { demoAgentId: () => demoAgent?.agent_id ?? null });
 */
import type { Context } from 'koa';
import type { Logger } from 'pino';
import { WIDGET_VERSION } from '../../protocol/widget-version.ts';
import { ApiError } from '../http/api-error.ts';
import type { RouteResult, RouteSpec } from '../http/api-routes.ts';
import type { HttpHost } from '../http/http-app.ts';
import type { ObjectStorage } from '../storage/object-storage.ts';
import { buildLiveKitModule, buildWidget, bundleOf, type WidgetBundle } from './build.ts';
import { demoPage, demoPageSecurityHeaders } from './demo-page.ts';

export { buildLiveKitModule, buildWidget, type WidgetBundle } from './build.ts';
export { WIDGET_VERSION } from '../../protocol/widget-version.ts';

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

/**
 * Every version a server built is kept in its object storage (`widget/<version>/<file>`), and
 * served from there by the servers of later versions: a versioned URL never changes, and never
 * goes away with a deploy. A page holding a `latest` script it cached (up to 5 minutes) imports
 * the LiveKit module of that script's version, which the new server then still serves.
 */
export const WIDGET_ARCHIVE = {
  prefix: 'widget',
  files: ['svc-agent.js', 'livekit-client.js'],
  /** Versions as WIDGET_VERSION writes them: anything else is not looked up. */
  version: /^\d{1,4}\.\d{1,4}\.\d{1,4}$/,
  /** Earlier versions' files kept in memory once read (a LiveKit module is about 0.7 MB with its gzip). */
  memoryEntries: 8,
  /** A version found not kept is not looked up again for this long (ms); another server may keep it by then. */
  missTtlMs: 60_000,
} as const;

export type WidgetArchive = Pick<ObjectStorage, 'putObject' | 'getObject' | 'headObject'>;
type WidgetFile = (typeof WIDGET_ARCHIVE.files)[number];

/** The ETag of a bundle's gzip representation: its content ETag with `-gz` inside the quotes. */
export const gzipEtag = (etag: string): string => etag.replace(/"$/, '-gz"');

const archiveKey = (version: string, file: WidgetFile) => `${WIDGET_ARCHIVE.prefix}/${version}/${file}`;

/** Stores a built file under its version unless that version's file is stored already. */
export async function archiveWidgetFile(archive: WidgetArchive, version: string, file: WidgetFile, code: Buffer): Promise<void> {
  if (await archive.headObject(archiveKey(version, file))) return;
  await archive.putObject(archiveKey(version, file), code, 'text/javascript; charset=utf-8');
}

export interface MountWidgetOptions {
  /** Where built versions are kept and earlier ones are found (the server's object storage); none: only this version is served. */
  readonly archive?: WidgetArchive;
  /** Sessions of this deployment run in LiveKit rooms: the LiveKit module is built and kept at start, not on its first request. */
  readonly liveKitRooms?: boolean;
  /** The agent the demo page at / talks to (a published agent whose allowlist admits this server's origin); null: no demo agent. */
  readonly demoAgentId?: () => string | null | Promise<string | null>;
  /** Serve the demo page at / (default true). */
  readonly demoPage?: boolean;
  /** Origins the demo page's widget may connect to besides this server (the deployment's LiveKit server). */
  readonly connectOrigins?: readonly string[];
}

export interface MountedWidget {
  /** Resolves with the built script (rejects if the build failed). */
  readonly bundle: () => Promise<WidgetBundle>;
  /** Resolves with the built LiveKit module (built on the first call or request). */
  readonly liveKitBundle: () => Promise<WidgetBundle>;
  readonly paths: typeof WIDGET_PATHS;
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

const PREFLIGHT = { 'Access-Control-Allow-Origin': '*', 'Access-Control-Allow-Methods': 'GET, HEAD, OPTIONS', 'Access-Control-Max-Age': '600' } as const;

const spec = (method: 'get' | 'options', path: string, operationId: string, summary: string): RouteSpec => ({
  method, path, operationId, summary, tag: 'Widget', auth: 'public', inOpenApi: false, responses: { 200: { description: summary } },
});

/** Declares the widget's routes on the server's root router. Call it once, before or after `listen()`. */
export function mountWidget(host: Pick<HttpHost, 'api' | 'rootRouter'> & { readonly logger: Logger }, options: MountWidgetOptions = {}): MountedWidget {
  /** A build kept in memory once it succeeded; a failed one is logged and tried again by the next request. */
  const memo = (what: string, run: () => Promise<WidgetBundle>) => {
    let built: Promise<WidgetBundle> | null = null;
    return () => {
      built ??= run().catch((err: unknown) => {
        host.logger.error({ err }, `${what} build failed`);
        built = null;
        throw err;
      });
      return built;
    };
  };
  const bundle = memo('widget', () => buildWidget());
  const liveKitBundle = memo('widget LiveKit module', async () => {
    const b = await buildLiveKitModule();
    host.logger.info({ version: b.version, bytes: b.code.length, gzip_bytes: b.gzip.length }, 'widget LiveKit module built');
    // Kept in the background: a slow or hanging object storage never holds up the module.
    if (options.archive) {
      void archiveWidgetFile(options.archive, b.version, 'livekit-client.js', b.code).catch((err: unknown) =>
        host.logger.warn({ err }, 'widget: could not keep the LiveKit module of this version in the object storage'),
      );
    }
    return b;
  });
  const archive = options.archive;
  void bundle()
    .then(async (b) => {
      host.logger.info({ version: b.version, bytes: b.code.length, gzip_bytes: b.gzip.length }, 'widget built');
      if (!archive) return;
      await archiveWidgetFile(archive, b.version, 'svc-agent.js', b.code);
      // Where sessions run in LiveKit rooms, the LiveKit module of this version too, built once per
      // version (not per start): pages running this version import it after the next deploy as
      // well. Elsewhere it is kept when it is first built (a request).
      if (options.liveKitRooms && !(await archive.headObject(archiveKey(b.version, 'livekit-client.js')))) await liveKitBundle();
    })
    .catch((err: unknown) => host.logger.warn({ err }, 'widget: could not keep this version in the object storage; pages of it may not load after the next deploy'));

  /**
   * An earlier version's file from the archive; null when none is kept. The last few read are
   * kept in memory (most recently used first out of `WIDGET_ARCHIVE.memoryEntries`), and a miss
   * for `missTtlMs`: these routes are public, and a request for each of many version strings
   * must not make as many storage requests.
   */
  const earlier = new Map<string, { readonly found: Promise<WidgetBundle | null>; readonly until: number }>();
  const archived = (version: string, file: WidgetFile): Promise<WidgetBundle | null> => {
    const key = archiveKey(version, file);
    const kept = earlier.get(key);
    if (kept && kept.until > Date.now()) {
      earlier.delete(key);
      earlier.set(key, kept); // most recently used last
      return kept.found;
    }
    const found = (async () => {
      if (!archive || !(await archive.headObject(key))) return null;
      return bundleOf(await archive.getObject(key), version);
    })();
    earlier.set(key, { found, until: Number.POSITIVE_INFINITY });
    void found.then(
      (b) => {
        if (!b && earlier.get(key)?.found === found) earlier.set(key, { found, until: Date.now() + WIDGET_ARCHIVE.missTtlMs });
      },
      () => {
        if (earlier.get(key)?.found === found) earlier.delete(key); // a failed read is tried again
      },
    );
    while (earlier.size > WIDGET_ARCHIVE.memoryEntries) earlier.delete(earlier.keys().next().value!);
    return found;
  };

  const serveScript = async (ctx: Context, built: () => Promise<WidgetBundle>, what: string, cache: string): Promise<RouteResult> => {
    let b: WidgetBundle;
    try {
      b = await built();
    } catch {
      throw new ApiError('internal_error', `${what} could not be built`);
    }
    // Each encoding is its own representation with its own strong ETag (RFC 9110 8.8.3): a cache
    // holding the gzip bytes must not have them confirmed for a client that takes identity.
    const gzip = /\bgzip\b/i.test(ctx.get('accept-encoding'));
    const etag = gzip ? gzipEtag(b.etag) : b.etag;
    const headers: Record<string, string> = {
      'Cache-Control': cache,
      ETag: etag,
      Vary: 'Accept-Encoding',
      'Access-Control-Allow-Origin': '*',
      'Cross-Origin-Resource-Policy': 'cross-origin',
      'Timing-Allow-Origin': '*',
      'X-Content-Type-Options': 'nosniff',
      'X-Widget-Version': b.version,
    };
    const match = ctx.get('if-none-match');
    if (match && match.split(',').some((t) => t.trim().replace(/^W\//, '') === etag)) return { status: 304, headers };
    if (gzip) headers['Content-Encoding'] = 'gzip';
    ctx.type = 'text/javascript; charset=utf-8';
    return { status: 200, body: gzip ? b.gzip : b.code, headers };
  };

  const scripts = [
    { path: WIDGET_PATHS.latest, id: 'getWidgetScript', built: bundle, what: 'the widget script', cache: WIDGET_CACHE.latest },
    { path: WIDGET_PATHS.versioned, id: 'getWidgetScriptVersioned', built: bundle, what: 'the widget script', cache: WIDGET_CACHE.versioned },
    { path: WIDGET_PATHS.liveKitLatest, id: 'getWidgetLiveKitModule', built: liveKitBundle, what: 'the widget LiveKit module', cache: WIDGET_CACHE.latest },
    { path: WIDGET_PATHS.liveKitVersioned, id: 'getWidgetLiveKitModuleVersioned', built: liveKitBundle, what: 'the widget LiveKit module', cache: WIDGET_CACHE.versioned },
  ];
  for (const script of scripts) {
    host.api.add(host.rootRouter, spec('get', script.path, script.id, script.what), ({ ctx }) => serveScript(ctx, script.built, script.what, script.cache));
    host.api.add(host.rootRouter, spec('options', script.path, `${script.id}Preflight`, `CORS preflight of ${script.what}`), async () => ({ status: 204, headers: { ...PREFLIGHT } }));
  }
  // Earlier versions, from the archive (after this version's routes, which answer it first).
  for (const file of WIDGET_ARCHIVE.files) {
    const what = file === 'svc-agent.js' ? 'an earlier version of the widget script' : 'an earlier version of the widget LiveKit module';
    const path = `/widget/:version/${file}`;
    const id = file === 'svc-agent.js' ? 'getWidgetScriptEarlier' : 'getWidgetLiveKitModuleEarlier';
    const notKept = (ctx: Context) => new ApiError('route_not_found', `no route ${ctx.method} ${ctx.path}`);
    host.api.add(host.rootRouter, spec('get', path, id, what), async ({ ctx, params }) => {
      const version = String(params.version ?? '');
      if (!WIDGET_ARCHIVE.version.test(version)) throw notKept(ctx);
      const b = await archived(version, file).catch((err: unknown) => {
        host.logger.warn({ err, version, file }, 'widget: the archive could not be read');
        throw new ApiError('service_unavailable', 'the widget archive could not be read; try again');
      });
      if (!b) throw notKept(ctx);
      return serveScript(ctx, async () => b, what, WIDGET_CACHE.versioned);
    });
    host.api.add(host.rootRouter, spec('options', path, `${id}Preflight`, `CORS preflight of ${what}`), async () => ({ status: 204, headers: { ...PREFLIGHT } }));
  }

  if (options.demoPage !== false) {
    const serveDemo = async ({ ctx, query, baseUrl }: { ctx: Context; query: Record<string, unknown>; baseUrl: string }): Promise<RouteResult> => {
      let agentId: string | null = typeof query.agent_id === 'string' && UUID_RE.test(query.agent_id) ? query.agent_id : null;
      if (!agentId) {
        try {
          agentId = (await options.demoAgentId?.()) ?? null;
        } catch (err) {
          host.logger.warn({ err }, 'demo agent lookup failed');
        }
      }
      ctx.type = 'text/html; charset=utf-8';
      const body = demoPage({ agentId: agentId && UUID_RE.test(agentId) ? agentId : null, baseUrl, scriptPath: WIDGET_PATHS.latest });
      return { status: 200, body, headers: { 'Cache-Control': 'private, no-store', ...demoPageSecurityHeaders(baseUrl, options.connectOrigins ?? []) } };
    };
    host.api.add(host.rootRouter, spec('get', '/', 'getDemoPage', 'The demo page'), serveDemo);
    host.api.add(host.rootRouter, spec('get', '/index.html', 'getDemoPageIndex', 'The demo page'), serveDemo);
  }
  return { bundle, liveKitBundle, paths: WIDGET_PATHS };
}
