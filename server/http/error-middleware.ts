import type { Middleware } from 'koa';
import type { Logger } from 'pino';
import type { IncomingMessage } from 'node:http';
import { SERVER_DEFAULTS } from '../config/server-config.ts';
import { isDatabaseUnavailable } from '../db/connect.ts';
import { StorageUnavailableError } from '../storage/object-storage.ts';
import { ApiError } from './api-error.ts';

/**
 * Turns every thrown error into the spec's error body. Client mistakes are `ApiError`s;
 * anything else is a server fault: logged with its stack, answered as a bare 500 without
 * internals. Errors raised by Koa itself (`ctx.throw`, http-errors) keep their 4xx status.
 */
export function errorMiddleware(logger: Logger): Middleware {
  return async (ctx, next) => {
    try {
      await next();
    } catch (err) {
      // Checked first: the client's own hang-up surfaces as ECONNRESET/"aborted", which must not
      // read as a database outage nor as a server fault.
      const apiError = isClientAbort(err, ctx.req) ? new ApiError('request_aborted', 'the client closed the connection before the request ended') : toApiError(err);
      if (apiError.code === 'request_aborted') ctx.state.clientAborted = true;
      else if (apiError.code === 'service_unavailable') logger.warn({ err, method: ctx.method, path: ctx.path }, err instanceof StorageUnavailableError ? 'object storage unavailable' : 'database unavailable');
      else if (apiError.status >= 500) logger.error({ err, method: ctx.method, path: ctx.path }, 'request failed');
      ctx.status = apiError.status;
      ctx.body = apiError.toBody();
      ctx.set('Cache-Control', 'private, no-store');
      if (apiError.status === 503) ctx.set('Retry-After', String(SERVER_DEFAULTS.retryAfterSeconds));
    }
  };
}

const ABORT_CODES = new Set(['ECONNRESET', 'ECONNABORTED', 'EPIPE', 'ERR_STREAM_PREMATURE_CLOSE']);

/** The client went away before its request was complete (it cannot be answered any more). */
export function isClientAbort(err: unknown, req: IncomingMessage): boolean {
  if (req.complete) return false;
  const code = (err as { code?: unknown })?.code;
  return (typeof code === 'string' && ABORT_CODES.has(code)) || (err as Error)?.message === 'aborted' || req.destroyed || req.socket?.destroyed === true;
}

function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof StorageUnavailableError) {
    return new ApiError('service_unavailable', 'the object storage is unavailable; retry later', { retry_after_seconds: SERVER_DEFAULTS.retryAfterSeconds });
  }
  if (isDatabaseUnavailable(err)) {
    return new ApiError('service_unavailable', 'the database is unavailable or overloaded; retry later', { retry_after_seconds: SERVER_DEFAULTS.retryAfterSeconds });
  }
  // PostgreSQL class 22 (data exception): a value the schema let through but the database cannot
  // store (out-of-range number, untranslatable character). The client's input, so a 400.
  const sqlState = (err as { code?: unknown })?.code;
  if (typeof sqlState === 'string' && /^22[0-9A-Z]{3}$/.test(sqlState)) {
    return new ApiError('validation_failed', 'a value in the request cannot be stored', { sql_state: sqlState });
  }
  const status = (err as { status?: number; statusCode?: number })?.status ?? (err as { statusCode?: number })?.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    const message = (err as Error).message || 'bad request';
    if (status === 413) return new ApiError('payload_too_large', message);
    if (status === 415) return new ApiError('unsupported_media_type', message);
    if (status === 404) return new ApiError('not_found', message);
    return new ApiError('validation_failed', message);
  }
  return new ApiError('internal_error', 'internal server error');
}
