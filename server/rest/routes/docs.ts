import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { gzip as gzipCallback } from 'node:zlib';
import type Router from '@koa/router';
import type { Context } from 'koa';
import { ApiError } from '../../http/api-error.ts';
import type { ApiRoutes } from '../../http/api-routes.ts';
import { errors } from '../schema/common.ts';
import { buildOpenApiDocument } from '../schema/openapi.ts';
import { REFERENCE_SCRIPT, REFERENCE_STYLE, renderReferencePage } from '../schema/reference-page.ts';

const gzip = promisify(gzipCallback);

/** The document only changes with a deploy; clients may cache it briefly. */
const DOCS_CACHE = 'public, max-age=300';
/** An asset URL carries its content hash (`?v=`): that exact content never changes. */
const ASSET_CACHE_VERSIONED = 'public, max-age=31536000, immutable';

/**
 * The request headers the documents' `servers[0].url` is taken from (without PUBLIC_BASE_URL):
 * `Host`, and the `X-Forwarded-*` pair only when the server trusts a proxy (SVC_TRUST_PROXY,
 * `app.proxy`). Named in `Vary` so a shared cache never serves one client's base URL to another.
 */
function docsHeaders(ctx: Context): Record<string, string> {
  return { 'Cache-Control': DOCS_CACHE, Vary: ctx.app.proxy ? 'Host, X-Forwarded-Host, X-Forwarded-Proto' : 'Host' };
}

/**
 * The reference page's policy: scripts and styles from this server only (Swagger UI sets inline
 * style attributes, hence `'unsafe-inline'` for styles, never for scripts), data: images (its
 * icons), requests to this origin and to the API's base URL ("Try it out"); no frames, forms or
 * base-URL changes.
 */
function pageSecurityHeaders(baseUrl: string): Record<string, string> {
  let apiOrigin = '';
  try {
    apiOrigin = new URL(baseUrl).origin;
  } catch {
    apiOrigin = '';
  }
  const csp = [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "font-src 'self' data:",
    `connect-src 'self'${apiOrigin ? ` ${apiOrigin}` : ''}`,
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
  return {
    'Content-Security-Policy': csp,
    'X-Content-Type-Options': 'nosniff',
    'Referrer-Policy': 'no-referrer',
    'X-Frame-Options': 'DENY',
    'Cross-Origin-Opener-Policy': 'same-origin',
  };
}

const require = createRequire(import.meta.url);

interface AssetSource {
  readonly type: string;
  load(): Promise<Buffer>;
}

/** Everything the page loads: Swagger UI's files from its npm package, and our two small ones. */
function assetSources(): Record<string, AssetSource> {
  const dist = dirname(require.resolve('swagger-ui-dist/package.json'));
  const file = (name: string, type: string): AssetSource => ({ type, load: () => readFile(join(dist, name)) });
  const text = (content: string, type: string): AssetSource => ({ type, load: async () => Buffer.from(content, 'utf8') });
  return {
    'swagger-ui-bundle.js': file('swagger-ui-bundle.js', 'text/javascript; charset=utf-8'),
    'swagger-ui.css': file('swagger-ui.css', 'text/css; charset=utf-8'),
    'favicon-32x32.png': file('favicon-32x32.png', 'image/png'),
    'reference.js': text(REFERENCE_SCRIPT, 'text/javascript; charset=utf-8'),
    'reference.css': text(REFERENCE_STYLE, 'text/css; charset=utf-8'),
  };
}

/** The asset names `/v1/docs/assets/{file}` serves (anything else is a 404). */
export const DOCS_ASSET_NAMES = ['swagger-ui-bundle.js', 'swagger-ui.css', 'favicon-32x32.png', 'reference.js', 'reference.css'] as const;

interface LoadedAsset {
  readonly type: string;
  readonly body: Buffer;
  readonly gzip: Buffer | undefined;
  readonly hash: string;
}

/** Loads (once per process) every asset with its content hash and, for text, a gzip copy. */
function assetStore(): () => Promise<Map<string, LoadedAsset>> {
  let loading: Promise<Map<string, LoadedAsset>> | undefined;
  return () => {
    loading ??= (async () => {
      const sources = assetSources();
      const entries = await Promise.all(
        Object.entries(sources).map(async ([name, source]) => {
          const body = await source.load();
          const hash = createHash('sha256').update(body).digest('base64url').slice(0, 16);
          const zipped = source.type.startsWith('text/') ? await gzip(body, { level: 9 }) : undefined;
          return [name, { type: source.type, body, gzip: zipped, hash }] as const;
        }),
      );
      return new Map(entries);
    })().catch((err) => {
      loading = undefined;
      throw err;
    });
    return loading;
  };
}

export function mountDocsRoutes(api: ApiRoutes, router: Router): void {
  const assets = assetStore();
  let cached: { base: string; doc: Record<string, unknown>; html?: string } | undefined;
  const current = (base: string) => {
    if (!cached || cached.base !== base) cached = { base, doc: buildOpenApiDocument(api.specs, base) };
    return cached;
  };
  const page = async (base: string) => {
    const entry = current(base);
    if (!entry.html) {
      const loaded = await assets();
      entry.html = renderReferencePage(entry.doc, { url: (name) => `docs/assets/${name}?v=${loaded.get(name)?.hash ?? ''}` });
    }
    return entry.html;
  };
  const tag = 'Documentation';
  api.add(router, {
    method: 'get', path: '/openapi.json', operationId: 'getOpenApiDocument', tag, auth: 'public',
    summary: 'This OpenAPI 3 document', responses: { 200: { description: 'OpenAPI document', schema: { type: 'object' } } },
  }, async ({ ctx, baseUrl }) => ({ status: 200, body: current(baseUrl).doc, headers: docsHeaders(ctx) }));
  api.add(router, {
    method: 'get', path: '/docs', operationId: 'getApiReference', tag, auth: 'public',
    summary: 'Human-readable API reference (Swagger UI, served by this server)',
    responses: { 200: { description: 'HTML page', contentType: 'text/html' } },
  }, async ({ ctx, baseUrl }) => {
    ctx.type = 'text/html; charset=utf-8';
    return { status: 200, body: await page(baseUrl), headers: { ...docsHeaders(ctx), ...pageSecurityHeaders(baseUrl) } };
  });
  api.add(router, {
    method: 'get', path: '/docs/assets/:file', operationId: 'getApiReferenceAsset', tag, auth: 'public',
    summary: 'A script, style sheet or icon of the reference page',
    description: 'Cached for a year when `v` is the content hash the page links (the URL changes with the content), else 5 minutes; gzip when accepted; `ETag` / `If-None-Match`.',
    params: { type: 'object', required: ['file'], properties: { file: { type: 'string', maxLength: 64, description: `Asset name: ${DOCS_ASSET_NAMES.map((n) => `\`${n}\``).join(', ')} (anything else is a 404).` } } },
    query: { type: 'object', properties: { v: { type: 'string', maxLength: 64, description: 'Content hash, as linked by the page.' } } },
    responses: { 200: { description: 'The asset (JavaScript, CSS or PNG)', contentType: 'application/octet-stream' }, 304: { description: 'Not modified' }, ...errors(404) },
  }, async ({ ctx, params, query }) => {
    const asset = (await assets()).get(params.file);
    if (!asset) throw new ApiError('not_found', `no documentation asset ${JSON.stringify(params.file)}`, { file: params.file });
    const etag = `"${asset.hash}"`;
    const headers: Record<string, string> = {
      'Cache-Control': query.v === asset.hash ? ASSET_CACHE_VERSIONED : DOCS_CACHE,
      ETag: etag,
      Vary: 'Accept-Encoding',
      'X-Content-Type-Options': 'nosniff',
      'Cross-Origin-Resource-Policy': 'same-origin',
    };
    const match = ctx.get('if-none-match');
    if (match && match.split(',').some((t) => t.trim().replace(/^W\//, '') === etag)) return { status: 304, headers };
    ctx.type = asset.type;
    const zipped = asset.gzip && /\bgzip\b/i.test(ctx.get('accept-encoding'));
    if (zipped) headers['Content-Encoding'] = 'gzip';
    return { status: 200, body: zipped ? asset.gzip : asset.body, headers };
  });
}
