/**
 * Koa's request handler (`app.callback()`), without the per-request work that does nothing on
 * this server. Koa's `handleRequest` calls `onFinished(res, ctx.onerror)` for every request: an
 * `AsyncResource`, four event listeners added to the response and its socket and removed again,
 * so that an error of the socket is passed to `ctx.onerror`. Here that is an `app.emit('error')`
 * and nothing else: the response cannot be written any more (the socket failed or closed), and
 * the app is silent with only Koa's own error listener (`app.silent`; the server adds none).
 * Everything else is Koa's: the context (`app.createContext`), the middleware composed once as
 * `callback()` composes it, errors of the chain to `ctx.onerror`, and the response written as
 * Koa's `respond` writes it (a string or buffer body ended at once, the other kinds as Koa does).
 *
 * An app that cannot be served this way (an `asyncLocalStorage` context, an error listener of
 * its own, not silent) is served by `app.callback()`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Readable, Stream, pipeline } from 'node:stream';
import type Koa from 'koa';
import type { Context } from 'koa';
import compose from 'koa-compose';

type Handler = (req: IncomingMessage, res: ServerResponse) => Promise<unknown>;

export function koaHandler(app: Koa): Handler {
  const koa = app as Koa & { ctxStorage?: unknown; compose?: typeof compose; onerror(err: Error): void };
  if (koa.ctxStorage || !app.silent || app.listenerCount('error') > 0) return app.callback() as Handler;
  const fn = (koa.compose ?? compose)(app.middleware as Parameters<typeof compose>[0]) as (ctx: Context) => Promise<void>;
  // As `callback()`: Koa's own listener, which `ctx.onerror` emits to (silent here).
  app.on('error', koa.onerror);
  const fallback = app.callback() as Handler;
  return (req, res) => {
    // Added after the handler was built: served by Koa's own handler, as before.
    if (app.listenerCount('error') !== 1 || !app.silent) return fallback(req, res);
    const ctx = app.createContext(req, res) as Context;
    res.statusCode = 404;
    return fn(ctx).then(() => respond(ctx)).catch((err: Error) => ctx.onerror(err));
  };
}

/** 204, 205, 304: no body (Koa's `statuses.empty`). */
const EMPTY = new Set([204, 205, 304]);

/** Koa's `respond` (koa/lib/application.js, 3.x), line for line. */
function respond(ctx: Context): unknown {
  if ((ctx as { respond?: boolean }).respond === false) return;
  const res = ctx.res;
  if (!ctx.writable) return res.end();
  let body: unknown = ctx.body;
  const code = ctx.status;
  if (EMPTY.has(code)) {
    ctx.body = null;
    return res.end();
  }
  if (ctx.method === 'HEAD') {
    if (!res.headersSent && !(ctx.response as unknown as { has(field: string): boolean }).has('Content-Length')) {
      const { length } = ctx.response;
      if (Number.isInteger(length)) ctx.length = length;
    }
    return res.end();
  }
  if (body === null || body === undefined) {
    if ((ctx.response as { _explicitNullBody?: boolean })._explicitNullBody) {
      ctx.response.remove('Content-Type');
      ctx.response.remove('Transfer-Encoding');
      ctx.length = 0;
      return res.end();
    }
    const text = ctx.req.httpVersionMajor >= 2 ? String(code) : ctx.message || String(code);
    if (!res.headersSent) {
      ctx.type = 'text';
      ctx.length = Buffer.byteLength(text);
    }
    return res.end(text);
  }
  if (typeof body === 'string' || Buffer.isBuffer(body)) return res.end(body);
  let stream: Stream | null = null;
  if (body instanceof Blob) stream = Readable.from(body.stream() as unknown as AsyncIterable<unknown>);
  else if (body instanceof ReadableStream) stream = Readable.from(body as unknown as AsyncIterable<unknown>);
  else if (body instanceof Response) stream = Readable.from((body.body ?? '') as unknown as AsyncIterable<unknown>);
  else if (isStream(body)) stream = body;
  if (stream) {
    return pipeline(stream as unknown as NodeJS.ReadableStream, res, (err) => {
      if (err && ctx.app.listenerCount('error')) ctx.onerror(err);
    });
  }
  body = JSON.stringify(body);
  if (!res.headersSent) ctx.length = Buffer.byteLength(body as string);
  res.end(body as string);
}

/** Koa's `is-stream.js`. */
function isStream(s: unknown): s is Stream {
  if (s instanceof Stream) return true;
  const o = s as Record<string, unknown> | null;
  return (
    o !== null && typeof o === 'object' && !!o.readable && typeof o.pipe === 'function' && typeof o.read === 'function' &&
    typeof o.readable === 'boolean' && typeof o.readableObjectMode === 'boolean' && typeof o.destroy === 'function' && typeof o.destroyed === 'boolean'
  );
}
