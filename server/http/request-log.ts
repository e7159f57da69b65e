import type { Middleware } from 'koa';
import type { Logger } from 'pino';

/**
 * One log line per request: method, path (no query string: signed URLs carry signatures
 * there), status and duration. Headers and bodies are never logged (keys, provider secrets).
 */
export function requestLog(logger: Logger): Middleware {
  return async (ctx, next) => {
    const started = performance.now();
    try {
      await next();
    } finally {
      if (logger.isLevelEnabled('info')) {
        logger.info({ method: ctx.method, path: ctx.path, status: ctx.status, ms: Math.round((performance.now() - started) * 10) / 10 }, 'request');
      }
    }
  };
}
