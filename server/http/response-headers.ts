import type { Middleware } from 'koa';

/** Paths reachable from any browser origin without a key (spec "Public"), plus signed storage URLs. */
const OPEN_PREFIXES = ['/v1/public/', '/v1/storage/'] as const;

/**
 * Default `Cache-Control: private, no-store` on every response (spec "Limits: Caching");
 * routes that are deliberately cacheable overwrite it. Open paths get permissive CORS and
 * answer preflights directly.
 */
export function responseHeaders(): Middleware {
  // Not async: a GET passes through without a promise of its own (the hot path).
  return (ctx, next) => {
    ctx.response.set('Cache-Control', 'private, no-store');
    const path = ctx.path;
    if (path.startsWith('/v1/') && OPEN_PREFIXES.some((p) => path.startsWith(p))) {
      ctx.set('Access-Control-Allow-Origin', '*');
      ctx.set('Access-Control-Expose-Headers', 'ETag, Cache-Control');
      if (ctx.method === 'OPTIONS') {
        ctx.set('Access-Control-Allow-Methods', 'GET, HEAD, PUT, POST, OPTIONS');
        ctx.set('Access-Control-Allow-Headers', ctx.get('access-control-request-headers') || 'Content-Type');
        ctx.set('Access-Control-Max-Age', '600');
        ctx.status = 204;
        return Promise.resolve();
      }
    }
    return next();
  };
}
