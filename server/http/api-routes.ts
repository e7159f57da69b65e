import type Router from '@koa/router';
import type { Context, Middleware } from 'koa';
import { Ajv, type ValidateFunction, type ErrorObject } from 'ajv';
import { ApiError } from './api-error.ts';
import { answerWith, nulPath, readJsonBody, type BodyPolicy, type ErrorBodyMapper, type RouteBodyRules } from './json-body.ts';
import { JsonText } from './json-text.ts';
import type { Principal } from './principal.ts';

export type JsonSchema = Record<string, unknown>;

/** How a route authenticates: `api_key` (X-API-Key), `public` (none), `signed_url` (HMAC query). */
export type RouteAuth = 'api_key' | 'public' | 'signed_url';

/**
 * One route described once: the same object drives validation at runtime and the OpenAPI
 * document, so the published description cannot drift from what the server enforces.
 */
export interface RouteSpec {
  /** `options` serves a preflight of its own (the widget script's); others get the shared CORS answer. */
  method: 'get' | 'post' | 'put' | 'patch' | 'delete' | 'options';
  /** Path under the router's prefix (`/agents/:agent_id` on the /v1 router) in router syntax. */
  path: string;
  operationId: string;
  summary: string;
  description?: string;
  tag: string;
  auth: RouteAuth;
  params?: JsonSchema;
  query?: JsonSchema;
  body?: JsonSchema;
  /** Extra router paths served by the same handler, left out of the document (e.g. unescaped slashes). */
  aliasPaths?: string[];
  /** The handler reads the raw request stream itself (object storage PUT); same as `acceptsBody: 'raw'`. */
  rawBody?: boolean;
  /**
   * Which request bodies the route accepts (`json` by default: any other media type is 415
   * `unsupported_media_type`). `beacon` also takes `text/plain` (navigator.sendBeacon), `raw`
   * leaves the stream to the handler. See `BodyPolicy`.
   */
  acceptsBody?: BodyPolicy;
  /** The route's body cap (bytes) when smaller than the server's `maxJsonBodyBytes`; past it, 413 and the connection closed. */
  maxBodyBytes?: number;
  /**
   * Left out of the OpenAPI document (`false`): the routes outside /v1 (the widget script, the
   * demo page, the operator's /healthz, /readyz, /metrics), described in docs/ instead.
   */
  inOpenApi?: false;
  /**
   * The route's own error shape (e.g. the Session API's `{error_code, message}`): every `ApiError`
   * raised for this route, by the shared checks (415, 413, invalid JSON, validation) or by the
   * handler, is answered with what this returns instead of the REST shape.
   */
  errorBody?: ErrorBodyMapper;
  responses: Record<number, { description: string; schema?: JsonSchema; contentType?: string }>;
}

export interface RouteInput {
  ctx: Context;
  params: any;
  query: any;
  body: any;
  /** Set on `api_key` routes. */
  principal: Principal;
  /** `{base_url}` as this client reaches the service (signed URLs, the OpenAPI server address). */
  baseUrl: string;
}

export interface RouteResult {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

export type RouteHandler = (input: RouteInput) => Promise<RouteResult | void>;

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const DATE_TIME_RE = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:?\d{2})$/;

function newAjv(coerce: boolean): Ajv {
  const ajv = new Ajv({ allErrors: true, strict: false, useDefaults: true, coerceTypes: coerce ? 'array' : false });
  ajv.addFormat('uuid', UUID_RE);
  ajv.addFormat('date-time', { validate: (s: string) => DATE_TIME_RE.test(s) && !Number.isNaN(Date.parse(s)) });
  ajv.addFormat('uri', {
    validate: (s: string) => {
      try {
        new URL(s);
        return true;
      } catch {
        return false;
      }
    },
  });
  ajv.addFormat('int64', { type: 'number', validate: (n: number) => Number.isSafeInteger(n) });
  return ajv;
}

/**
 * Writes a route's result on the response. A plain object or array is serialised here, once, as
 * `application/json; charset=utf-8` (unless the route set another type): Koa's body setter and
 * `respond` would otherwise test it against every body kind (stream, Blob, Response ...) twice and
 * look the media type up by name for every request. Other bodies (text, buffers, streams) go to
 * Koa as they are.
 */
function answer(ctx: Context, result: RouteResult): void {
  ctx.status = result.status;
  const headers = result.headers;
  if (headers) for (const name in headers) ctx.set(name, headers[name]!);
  const body = result.body;
  if (body instanceof JsonText) {
    ctx.res.setHeader('Content-Type', JSON_TYPE);
    ctx.body = body.text;
  } else if (body !== null && typeof body === 'object' && (Array.isArray(body) || isPlainObject(body))) {
    if (!ctx.res.hasHeader('Content-Type')) ctx.res.setHeader('Content-Type', JSON_TYPE);
    ctx.body = JSON.stringify(body);
  } else if (body !== undefined) ctx.body = body;
}

const JSON_TYPE = 'application/json; charset=utf-8';

function isPlainObject(o: object): boolean {
  const proto = Object.getPrototypeOf(o);
  return proto === Object.prototype || proto === null;
}

/** Whether `o` has an own enumerable key (without building the array of them). */
function hasKeys(o: object): boolean {
  for (const _ in o) return true;
  return false;
}

/** Body validation never coerces (a string "5" is not an integer); path and query values do. */
const bodyAjv = newAjv(false);
const queryAjv = newAjv(true);

export function compileBodySchema(schema: JsonSchema): ValidateFunction {
  return bodyAjv.compile(schema);
}

export function validationError(where: string, errors: ErrorObject[] | null | undefined): ApiError {
  const issues = (errors ?? []).map((e) => ({
    location: where,
    path: e.instancePath || '/',
    message: e.message ?? 'invalid',
    ...(e.keyword === 'additionalProperties' ? { property: (e.params as { additionalProperty: string }).additionalProperty } : {}),
  }));
  const first = issues[0];
  const message = first
    ? `invalid ${where}: ${first.path} ${first.message}${first.property ? ` (${first.property})` : ''}`
    : `invalid ${where}`;
  return new ApiError('validation_failed', message, { issues });
}

/**
 * Every HTTP route of the server is declared here, the same way: `add(router, spec, handler)`.
 * `openapi.ts` turns the /v1 routes' `specs` into the published document.
 */
export class ApiRoutes {
  /** The routes of the OpenAPI document (every spec but those with `inOpenApi: false`). */
  readonly specs: RouteSpec[] = [];
  /** Body rules by `METHOD /full/path` (router prefix included), read by `bodyMediaTypeGuard`. */
  readonly bodyRules = new Map<string, RouteBodyRules>();

  constructor(
    private readonly authenticate: Middleware,
    private readonly maxJsonBodyBytes: number,
    private readonly baseUrlOf: (ctx: Context) => string,
  ) {}

  private declareBody(router: Router, method: RouteSpec['method'], path: string, policy: BodyPolicy, errorBody?: ErrorBodyMapper): void {
    this.bodyRules.set(`${method.toUpperCase()} ${router.opts.prefix ?? ''}${path}`, { policy, errorBody });
  }

  add(router: Router, spec: RouteSpec, handler: RouteHandler): void {
    if (spec.inOpenApi !== false) this.specs.push(spec);
    const policy: BodyPolicy = spec.rawBody ? 'raw' : (spec.acceptsBody ?? 'json');
    const maxBodyBytes = Math.min(spec.maxBodyBytes ?? this.maxJsonBodyBytes, this.maxJsonBodyBytes);
    for (const path of [spec.path, ...(spec.aliasPaths ?? [])]) this.declareBody(router, spec.method, path, policy, spec.errorBody);
    const validateParams = spec.params ? queryAjv.compile(spec.params) : undefined;
    const validateQuery = queryAjv.compile(spec.query ?? { type: 'object' });
    const validateBody = spec.body ? bodyAjv.compile(spec.body) : undefined;
    const middleware: Middleware[] = spec.auth === 'api_key' ? [this.authenticate] : [];
    const baseUrlOf = this.baseUrlOf;
    const serve = async (ctx: Context) => {
      const params = { ...(ctx as unknown as { params: Record<string, string> }).params };
      if (validateParams && !validateParams(params)) throw validationError('path', validateParams.errors);
      // Koa parses the query string only when there is one (most GETs have none).
      const query = ctx.querystring ? { ...ctx.query } : {};
      const nul = hasKeys(query) || hasKeys(params) ? (nulPath(query, '') ?? nulPath(params, '')) : null;
      if (nul !== null) throw new ApiError('validation_failed', `invalid parameter ${nul}: contains a NUL character`, { issues: [{ location: 'query', path: nul, message: 'must not contain NUL characters' }] });
      if (!validateQuery(query)) throw validationError('query', validateQuery.errors);
      let body: unknown;
      // No Content-Length and no Transfer-Encoding (every GET): no body, and no promise to wait for.
      if (policy !== 'raw' && (ctx.req.headers['content-length'] !== undefined || ctx.req.headers['transfer-encoding'] !== undefined)) {
        body = await readJsonBody(ctx, maxBodyBytes, policy);
      }
      if (validateBody && policy !== 'raw') {
        if (body === undefined) throw new ApiError('validation_failed', 'request body is required', { issues: [] });
        if (!validateBody(body)) throw validationError('body', validateBody.errors);
      }
      // A plain value, not a getter: an accessor in a per-request literal is allocated in the old
      // generation and kept the whole request graph alive through young collections (measured:
      // about 2 MB promoted per scavenge, a full collection every few seconds under load).
      const result = await handler({ ctx, params, query, body, principal: ctx.state.principal, baseUrl: baseUrlOf(ctx) });
      if (result) answer(ctx, result);
    };
    // Koa-compose calls the route's last middleware with a `next` it never uses: `serve` is the
    // route itself (no wrapper, no extra promise) unless the route maps errors to its own shape.
    const errorBody = spec.errorBody;
    const run: Middleware = errorBody
      ? async (ctx) => {
          try {
            await serve(ctx);
          } catch (err) {
            if (!(err instanceof ApiError)) throw err;
            answerWith(ctx, errorBody(err), err.status);
          }
        }
      : serve;
    for (const path of [spec.path, ...(spec.aliasPaths ?? [])]) router[spec.method](path, ...middleware, run);
  }
}
