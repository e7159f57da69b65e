import type { Middleware } from 'koa';
import type { ApiKeys } from '../services/api-keys.ts';
import { ApiError } from './api-error.ts';

/** A key longer than this cannot be ours; refusing early keeps hashing cheap. */
const MAX_KEY_LENGTH = 200;

/** `X-API-Key` authentication; sets `ctx.state.principal` (spec "Authentication" 1). */
export function authenticate(apiKeys: ApiKeys): Middleware {
  return async (ctx, next) => {
    const key = ctx.get('x-api-key');
    if (!key) throw new ApiError('unauthorized', 'missing X-API-Key header');
    if (key.length > MAX_KEY_LENGTH) throw new ApiError('unauthorized', 'invalid or revoked API key');
    // A cached key is answered without a promise round (every request of a busy client).
    const principal = apiKeys.cachedPrincipal(key) ?? (await apiKeys.authenticateCached(key));
    if (!principal) throw new ApiError('unauthorized', 'invalid or revoked API key');
    ctx.state.principal = principal;
    await next();
  };
}
