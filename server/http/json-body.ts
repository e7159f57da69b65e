import type Router from '@koa/router';
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { Context, Middleware } from 'koa';
import { ApiError } from './api-error.ts';

/**
 * Refuses a request body whose media type the matched route does not accept (415), before any
 * byte of it is read, by the rules in `policies` (keyed `METHOD /full/route/path`). Every route of
 * `ApiRoutes.add` has rules (JSON only unless its spec says `acceptsBody`). Runs before
 * authentication: a wrong media type is refused without a database round trip.
 */
export function bodyMediaTypeGuard(routers: readonly Router[], policies: ReadonlyMap<string, RouteBodyRules>): Middleware {
  // Not async: a request without a body (every GET) passes through without a promise of its own.
  return (ctx, next) => {
    if (hasBody(ctx)) {
      const route = matchedRoute(routers, ctx.path, ctx.method);
      // No route (the 404/405 answer comes later): not ours to check.
      const rules: RouteBodyRules = (route && policies.get(`${ctx.method} ${route}`)) || { policy: 'raw' };
      const refused = mediaTypeError(ctx, rules.policy);
      if (refused) {
        if (!rules.errorBody) return Promise.reject(refused);
        answerWith(ctx, rules.errorBody(refused), refused.status);
        return Promise.resolve();
      }
    }
    return next();
  };
}

/** The path pattern (`/v1/agents/:agent_id`) of the route that serves `method path`, or undefined. */
export function matchedRoute(routers: readonly Pick<Router, 'match'>[], path: string, method: string): string | undefined {
  for (let r = routers.length - 1; r >= 0; r--) {
    const layers = routers[r]!.match(path, method).pathAndMethod;
    for (let i = layers.length - 1; i >= 0; i--) {
      const layer = layers[i]!;
      if (layer.methods.length && typeof layer.path === 'string') return layer.path;
    }
  }
  return undefined;
}

/** Writes a route's own error answer (`errorBody`) on the response. */
export function answerWith(ctx: Context, answer: ReturnType<ErrorBodyMapper>, status: number): void {
  ctx.status = answer.status ?? status;
  ctx.body = answer.body;
  for (const [name, value] of Object.entries(answer.headers ?? {})) ctx.set(name, value);
}

/** A route's own error shape for the errors the shared machinery raises (415, 413, 400 ...). */
export type ErrorBodyMapper = (error: ApiError) => { status?: number; body: unknown; headers?: Record<string, string> };

export interface RouteBodyRules {
  policy: BodyPolicy;
  errorBody?: ErrorBodyMapper;
}

/**
 * What a route accepts as request body (RouteSpec `acceptsBody`):
 * - `json` (default): no body, or a body typed `application/json` / `application/*+json`;
 *   anything else (text/plain, forms, no Content-Type) is 415 `unsupported_media_type`;
 * - `beacon`: also `text/plain` (what `navigator.sendBeacon(url, string)` sends), parsed as JSON
 *   when not empty; for `POST /v1/public/agents/connect/:room`;
 * - `ignored`: any body of any type, read up to the route's cap and dropped (the release route:
 *   a beacon may carry a little text nobody needs);
 * - `raw`: the handler reads the stream itself (object storage part PUT); nothing is checked.
 */
export type BodyPolicy = 'json' | 'beacon' | 'ignored' | 'raw';

const JSON_TYPE_RE = /^application\/([\w.+-]*\+)?json\s*(;|$)/i;
const TEXT_TYPE_RE = /^text\/plain\s*(;|$)/i;

/** Whether the request carries a body (HTTP/1.1: a non-zero Content-Length or any Transfer-Encoding). */
export function hasBody(ctx: Context): boolean {
  const headers = ctx.req.headers;
  if (headers['transfer-encoding'] !== undefined) return true;
  const length = headers['content-length'];
  return length !== undefined && length.trim() !== '0';
}

/** The 415 a request gets when its body's media type is not acceptable under `policy`, or null. */
export function mediaTypeError(ctx: Context, policy: BodyPolicy): ApiError | null {
  if (policy === 'raw' || policy === 'ignored' || !hasBody(ctx)) return null;
  const type = ctx.get('content-type').trim();
  if (JSON_TYPE_RE.test(type) || (policy === 'beacon' && TEXT_TYPE_RE.test(type))) return null;
  return new ApiError('unsupported_media_type', type ? `expected Content-Type application/json, got ${type}` : 'a request body needs Content-Type application/json', {
    content_type: type || null,
    accepted: policy === 'beacon' ? ['application/json', 'text/plain'] : ['application/json'],
  });
}

/**
 * Reads and parses a JSON request body with a hard size cap. Written here rather than taken
 * from a body-parser so every failure (too large, not JSON, wrong media type) maps to one
 * precise error code instead of a generic 400/500.
 */
export async function readJsonBody(ctx: Context, maxBytes: number, policy: BodyPolicy = 'json'): Promise<unknown> {
  const headers = ctx.req.headers;
  // No Content-Length and no Transfer-Encoding: HTTP/1.1 says there is no body (every GET).
  if (headers['content-length'] === undefined && headers['transfer-encoding'] === undefined) return undefined;
  // Refused before reading a byte: the body is left for Node to discard.
  const refused = mediaTypeError(ctx, policy);
  if (refused) throw refused;
  if (Number(headers['content-length'] || 0) > maxBytes) throw payloadTooLarge(ctx, maxBytes);
  const raw = await readUpTo(ctx.req, maxBytes);
  if (raw === null) throw payloadTooLarge(ctx, maxBytes);
  if (policy === 'ignored') return undefined;
  const text = raw.toString('utf8');
  if (text.trim() === '') return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new ApiError('invalid_json', `request body is not valid JSON: ${(err as Error).message}`);
  }
  const problem = inspectJson(value);
  if (problem) {
    throw new ApiError('validation_failed', `invalid body: ${problem.path || '/'} ${problem.message}`, { issues: [{ location: 'body', path: problem.path || '/', message: problem.message }] });
  }
  return value;
}

/**
 * The 413 of any body over `maxBytes` (a JSON body, an upload part), and the connection closed
 * once it is answered (`Connection: close`, lingering): the rest of the body is never read.
 * Draining it on a kept-alive socket let one client make the server read 128 MB for 45 s after
 * its answer (issue 32). The request must not have been destroyed (that resets the socket, and
 * the answer is lost): stop reading it instead.
 */
export function payloadTooLarge(ctx: Context, maxBytes: number, message = `request body exceeds ${maxBytes} bytes`): ApiError {
  ctx.set('Connection', 'close');
  lingerOnClose(ctx.req.socket);
  return new ApiError('payload_too_large', message, { max_bytes: maxBytes });
}

export const BODY_LIMIT_DEFAULTS = {
  /**
   * How long a connection closed after a 413 stays open, its answer and FIN sent, before its
   * socket is closed (nothing more of the body is read). What Apache's and nginx's lingering
   * close do, for the same reason.
   */
  lingerMs: 2_000,
} as const;

/**
 * Makes the close that follows the answer (Node calls `destroySoon` on a `Connection: close`
 * response) a lingering one: the answer and a FIN are sent at once, the socket is closed only
 * `lingerMs` later (sooner if it fails). Closing a socket whose unread body is still
 * in the kernel's buffer sends a reset instead of a FIN, and a reset makes the client's kernel
 * discard what it received and its application had not read yet: the 413 itself (a client
 * streaming a body saw the connection reset, `no complete response head`, in a loaded CI run).
 * Nothing more of the body is read meanwhile: the client's sending stops on a full window.
 */
function lingerOnClose(socket: Socket | null): void {
  if (!socket || socket.destroyed) return;
  socket.destroySoon = function lingering(this: Socket) {
    if (this.writable) this.end();
    if (this.destroyed) return;
    const timer = setTimeout(() => this.destroy(), BODY_LIMIT_DEFAULTS.lingerMs);
    timer.unref();
    this.once('close', () => clearTimeout(timer));
  };
}

/**
 * The body, or null as soon as it passes `max` bytes; then the stream is only paused, not
 * destroyed: destroying a request marks it aborted (answered as the client's hang-up), and the
 * socket is closed after the answer anyway. (`for await` destroys the stream when left early.)
 */
function readUpTo(req: IncomingMessage, max: number): Promise<Buffer | null> {
  // Gone before the route got here (a slow key lookup under load): its 'close' has been emitted
  // already, and waiting for it would hold the request forever, never answered nor logged.
  if (!req.complete && (req.destroyed || req.socket?.destroyed)) return Promise.reject(Object.assign(new Error('aborted'), { code: 'ECONNRESET' }));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = () => {
      req.off('data', onData).off('end', onEnd).off('error', onError).off('close', onClose);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= max) {
        chunks.push(chunk);
        return;
      }
      done();
      req.pause();
      resolve(null);
    };
    const onEnd = () => {
      done();
      resolve(Buffer.concat(chunks, size));
    };
    const onError = (err: Error) => {
      done();
      reject(err);
    };
    // The client went away mid-body: the same error Node gives a reader (errorMiddleware: 499).
    const onClose = () => {
      if (req.complete) return;
      done();
      reject(Object.assign(new Error('aborted'), { code: 'ECONNRESET' }));
    };
    req.on('data', onData).on('end', onEnd).on('error', onError).on('close', onClose);
  });
}

export const JSON_BODY_RULES = {
  /** Deeper documents are refused: no field needs it, and deep nesting exhausts stacks downstream. */
  maxDepth: 64,
} as const;

/**
 * Walks a parsed document without recursion: PostgreSQL text and jsonb cannot hold U+0000, and
 * nesting beyond `maxDepth` is refused. Returns the first problem, or null.
 */
export function inspectJson(root: unknown, maxDepth: number = JSON_BODY_RULES.maxDepth): { path: string; message: string } | null {
  const stack: Array<{ value: unknown; path: string; depth: number }> = [{ value: root, path: '', depth: 0 }];
  while (stack.length) {
    const { value, path, depth } = stack.pop()!;
    if (typeof value === 'string') {
      if (value.includes('\0')) return { path, message: 'contains a NUL character' };
      continue;
    }
    if (!value || typeof value !== 'object') continue;
    if (depth >= maxDepth) return { path, message: `is nested deeper than ${maxDepth} levels` };
    const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v] as const) : Object.entries(value);
    for (const [key, child] of entries) {
      if (key.includes('\0')) return { path: `${path}/${key.replaceAll('\0', '')}`, message: 'has a key with a NUL character' };
      stack.push({ value: child, path: `${path}/${key}`, depth: depth + 1 });
    }
  }
  return null;
}

/** Path of the first string or key holding U+0000 (query strings, path parameters), or null. */
export function nulPath(value: unknown, path: string): string | null {
  const problem = inspectJson(value, Number.MAX_SAFE_INTEGER);
  return problem ? `${path}${problem.path}` : null;
}
