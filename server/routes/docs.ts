import type Router from '@koa/router';
import type { Context } from 'koa';
import type { ApiRoutes } from '../http/api-routes.ts';
import { buildOpenApiDocument } from '../schema/openapi.ts';
import { renderReferencePage } from '../schema/reference-page.ts';

/** The document only changes with a deploy; clients may cache it briefly. */
const DOCS_CACHE = 'public, max-age=300';

/**
 * The request headers the documents' `servers[0].url` is taken from (without PUBLIC_BASE_URL):
 * `Host`, and the `X-Forwarded-*` pair only when the server trusts a proxy (SVC_TRUST_PROXY,
 * `app.proxy`). Named in `Vary` so a shared cache never serves one client's base URL to another.
 */
function docsHeaders(ctx: Context): Record<string, string> {
  return { 'Cache-Control': DOCS_CACHE, Vary: ctx.app.proxy ? 'Host, X-Forwarded-Host, X-Forwarded-Proto' : 'Host' };
}

export function mountDocsRoutes(api: ApiRoutes, router: Router): void {
  let cached: { base: string; doc: Record<string, unknown>; html: string } | undefined;
  const current = (base: string) => {
    if (!cached || cached.base !== base) {
      const doc = buildOpenApiDocument(api.specs, base);
      cached = { base, doc, html: renderReferencePage(doc) };
    }
    return cached;
  };
  api.add(router, {
    method: 'get', path: '/openapi.json', operationId: 'getOpenApiDocument', tag: 'Documentation', auth: 'public',
    summary: 'This OpenAPI 3 document', responses: { 200: { description: 'OpenAPI document', schema: { type: 'object' } } },
  }, async ({ ctx, baseUrl }) => ({ status: 200, body: current(baseUrl).doc, headers: docsHeaders(ctx) }));
  api.add(router, {
    method: 'get', path: '/docs', operationId: 'getApiReference', tag: 'Documentation', auth: 'public',
    summary: 'Human-readable API reference', responses: { 200: { description: 'HTML page', contentType: 'text/html' } },
  }, async ({ ctx, baseUrl }) => {
    ctx.type = 'text/html; charset=utf-8';
    return { status: 200, body: current(baseUrl).html, headers: docsHeaders(ctx) };
  });
}
