import type { Context, Middleware, Next } from 'koa';
import type { ApiKeys } from '../services/api-keys.ts';
import { ApiError } from './api-error.ts';

/** A key longer than this cannot be ours; refusing early keeps hashing cheap. */
const MAX_KEY_LENGTH = 200;

/** `X-API-Key` authentication; sets `ctx.state.principal` (spec "Authentication" 1). */
export function authenticate(apiKeys: ApiKeys): Middleware {
  const lookUp = async (ctx: Context, next: Next, key: string) => {
    const principal = await apiKeys.authenticateCached(key);
    if (!principal) throw new ApiError('unauthorized', 'invalid or revoked API key');
    ctx.state.principal = principal;
    await next();
  };
  // Not async: a cached key (every request of a busy client) goes on to the route without a
  // promise of its own; the first request of a key, or one after the cache entry expired, waits
  // for the database in `lookUp`.
  return (ctx, next) => {
    const key = ctx.request.headers['x-api-key'];
    if (typeof key !== 'string' || !key) return Promise.reject(new ApiError('unauthorized', 'missing X-API-Key header'));
    if (key.length > MAX_KEY_LENGTH) return Promise.reject(new ApiError('unauthorized', 'invalid or revoked API key'));
    const principal = apiKeys.cachedPrincipal(key);
    if (!principal) return lookUp(ctx, next, key);
    ctx.state.principal = principal;
    return next();
  };
}
