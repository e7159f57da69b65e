import type { Middleware } from 'koa';
import type { Logger } from 'pino';

/**
 * One log line per request: method, path (no query string: signed URLs carry signatures
 * there), status and duration. Headers and bodies are never logged (keys, provider secrets).
 * `quiet` paths are not logged (health probes: one every few seconds, forever).
 */
export function requestLog(logger: Logger, quiet: ReadonlySet<string> = new Set()): Middleware {
  return async (ctx, next) => {
    if (quiet.has(ctx.path)) return next();
    const started = performance.now();
    try {
      await next();
    } finally {
      if (logger.isLevelEnabled('info')) {
        // 499 (nginx's "client closed request"): the client hung up mid-request; never answered.
        const status = ctx.state.clientAborted ? 499 : ctx.status;
        logger.info({ method: ctx.method, path: ctx.path, status, ms: Math.round((performance.now() - started) * 10) / 10 }, 'request');
      }
    }
  };
}
