import type { Middleware } from 'koa';

/** Paths reachable from any browser origin without a key (spec "Public"), plus signed storage URLs. */
const OPEN_PREFIXES = ['/v1/public/', '/v1/storage/'] as const;

/**
 * Default `Cache-Control: private, no-store` on every response (spec "Limits: Caching");
 * routes that are deliberately cacheable overwrite it. Open paths get permissive CORS and
 * answer preflights directly.
 */
export function responseHeaders(): Middleware {
  return async (ctx, next) => {
    ctx.set('Cache-Control', 'private, no-store');
    if (OPEN_PREFIXES.some((p) => ctx.path.startsWith(p))) {
      ctx.set('Access-Control-Allow-Origin', '*');
      ctx.set('Access-Control-Expose-Headers', 'ETag, Cache-Control');
      if (ctx.method === 'OPTIONS') {
        ctx.set('Access-Control-Allow-Methods', 'GET, HEAD, PUT, POST, OPTIONS');
        ctx.set('Access-Control-Allow-Headers', ctx.get('access-control-request-headers') || 'Content-Type');
        ctx.set('Access-Control-Max-Age', '600');
        ctx.status = 204;
        return;
      }
    }
    await next();
  };
}
