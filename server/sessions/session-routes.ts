/**
 * The Session API's two public routes (spec "Public", "Start-session request", "Errors: Session
 * API"): parse, call LiveSessions, shape. Errors use the Session API's `{error_code, message}`
 * body, so these routes read their bodies themselves instead of the REST body parser. CORS and
 * preflights for /v1/public/* come from the server's response-headers middleware.
 */
import type Router from '@koa/router';
import type { Context } from 'koa';
import type { Logger } from 'pino';
import type { JsonSchema, RouteSpec } from '../http/api-routes.ts';
import type { LiveSessions } from './live-sessions.ts';
import { SessionError } from './session-errors.ts';

export const SESSION_API_LIMITS = {
  /** Largest connect body (the fields need a few hundred bytes). */
  maxConnectBodyBytes: 16 * 1024,
  /** Largest release body read (and ignored): a beacon may carry a little text. */
  maxReleaseBodyBytes: 64 * 1024,
  maxClientUserRefLength: 256,
  maxAgentIdLength: 128,
} as const;

const JSON_TYPE = /^application\/([\w.+-]*\+)?json\s*(;|$)/i;
const ROOM_NAME = /^[A-Za-z0-9_-]{1,128}$/;

const sessionError = (code: string): JsonSchema => ({
  description: code,
  type: 'object',
  required: ['error_code', 'message'],
  properties: { error_code: { type: 'string', const: code }, message: { type: 'string' }, retry_after_seconds: { type: 'integer', minimum: 1 } },
});

const connectBody: JsonSchema = {
  type: 'object',
  required: ['agent_id'],
  properties: {
    agent_id: { type: 'string', description: 'The agent to start a session with (a UUID; anything else is agent_not_found).' },
    client_user_ref: { type: ['string', 'null'], maxLength: SESSION_API_LIMITS.maxClientUserRefLength, description: 'Opaque id of your end user; appears in call history.' },
    auth_token: { type: 'string', description: 'Required when the agent has auth_enabled: `v1.<expires_at>.<hex HMAC-SHA256>` minted by your backend (docs/sessions.md).' },
  },
};

/** Reads a body up to `max` bytes; past it, the rest is drained and `null` returned. */
async function readBody(ctx: Context, max: number): Promise<Buffer | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of ctx.req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > max) {
      ctx.req.resume();
      return null;
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

function invalid(message: string): SessionError {
  return new SessionError('invalid_request', message);
}

async function parseConnect(ctx: Context): Promise<{ agentId: string; clientUserRef: string | null; authToken: unknown }> {
  const raw = await readBody(ctx, SESSION_API_LIMITS.maxConnectBodyBytes);
  if (raw === null) throw invalid(`the request body exceeds ${SESSION_API_LIMITS.maxConnectBodyBytes} bytes`);
  if (raw.toString('utf8').trim() === '') throw invalid('a JSON body with agent_id is required');
  const type = ctx.get('content-type');
  if (!JSON_TYPE.test(type)) throw new SessionError('unsupported_media_type', `expected Content-Type application/json, got ${type || 'none'}`);
  let body: unknown;
  try {
    body = JSON.parse(raw.toString('utf8'));
  } catch (err) {
    throw invalid(`the request body is not valid JSON: ${(err as Error).message}`);
  }
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw invalid('the request body must be a JSON object');
  const { agent_id: agentId, client_user_ref: ref, auth_token: authToken } = body as Record<string, unknown>;
  if (typeof agentId !== 'string') throw invalid('agent_id is required and must be a string');
  if (agentId.length > SESSION_API_LIMITS.maxAgentIdLength) throw new SessionError('agent_not_found', 'agent not found');
  if (ref !== undefined && ref !== null && typeof ref !== 'string') throw invalid('client_user_ref must be a string');
  if (typeof ref === 'string' && ref.length > SESSION_API_LIMITS.maxClientUserRefLength) throw invalid(`client_user_ref is longer than ${SESSION_API_LIMITS.maxClientUserRefLength} characters`);
  if (typeof ref === 'string' && ref.includes('\0')) throw invalid('client_user_ref must not contain NUL characters');
  if (authToken !== undefined && typeof authToken !== 'string') throw invalid('auth_token must be a string');
  return { agentId, clientUserRef: typeof ref === 'string' ? ref : null, authToken };
}

export const SESSION_ROUTE_SPECS: RouteSpec[] = [
  {
    method: 'post', path: '/public/agents/connect', operationId: 'connectAgent', tag: 'Session API', auth: 'public',
    summary: 'Start a live session with a published agent',
    description: 'Checks the Origin against allowed_hostnames, auth_token when auth_enabled, then the agent\'s max_concurrency; creates a WebRTC room and starts the agent in it. Errors are `{error_code, message}` (Session API shape).',
    body: connectBody,
    responses: {
      200: { description: 'Session', schema: { type: 'object', required: ['session_id', 'room_url', 'token'], properties: { session_id: { type: 'string' }, room_url: { type: 'string' }, token: { type: 'string' } } } },
      400: { description: 'invalid_request', schema: sessionError('invalid_request') },
      403: { description: 'agent_unpublished or auth_failed', schema: sessionError('auth_failed') },
      404: { description: 'agent_not_found', schema: sessionError('agent_not_found') },
      415: { description: 'unsupported_media_type', schema: sessionError('unsupported_media_type') },
      429: { description: 'concurrency_limit (Retry-After header and retry_after_seconds)', schema: sessionError('concurrency_limit') },
      500: { description: 'internal_error', schema: sessionError('internal_error') },
      502: { description: 'room_creation_failed or orchestrator_error', schema: sessionError('orchestrator_error') },
      503: { description: 'server_busy (this server has no capacity left; Retry-After)', schema: sessionError('server_busy') },
    },
  },
  {
    method: 'post', path: '/public/agents/connect/:room', operationId: 'releaseAgentSession', tag: 'Session API', auth: 'public',
    summary: 'Release the session of a room',
    description: 'Idempotent: an unknown, ended or already released room gives `released: 0`. Accepts no body or any body (text/plain from navigator.sendBeacon), which is ignored.',
    params: { type: 'object', properties: { room: { type: 'string' } } },
    responses: { 200: { description: 'How many sessions this call released', schema: { type: 'object', required: ['released'], properties: { released: { type: 'integer', minimum: 0 } } } } },
  },
];

export function mountSessionRoutes(router: Router, sessions: LiveSessions, logger: Logger, baseUrl: (ctx: Context) => string): void {
  const respond = async (ctx: Context, work: () => Promise<unknown>) => {
    // Until its response is written: a shutdown answers it instead of resetting its connection.
    sessions.hold(new Promise<void>((resolve) => ctx.res.once('finish', resolve).once('close', resolve)));
    ctx.set('Cache-Control', 'private, no-store');
    ctx.set('Access-Control-Expose-Headers', 'Retry-After');
    try {
      ctx.body = await work();
      ctx.status = 200;
    } catch (err) {
      const error = err instanceof SessionError ? err : new SessionError('internal_error', 'internal server error');
      if (!(err instanceof SessionError)) logger.error({ err, path: ctx.path }, 'session request failed');
      if (error.retryAfterSeconds !== undefined) ctx.set('Retry-After', String(error.retryAfterSeconds));
      ctx.status = error.status;
      ctx.body = error.toBody();
    }
  };

  router.post('/public/agents/connect', (ctx) =>
    respond(ctx, async () => {
      const body = await parseConnect(ctx);
      return sessions.connect({ ...body, origin: ctx.get('origin') || undefined, baseUrl: baseUrl(ctx) });
    }),
  );

  router.post('/public/agents/connect/:room', (ctx) =>
    respond(ctx, async () => {
      if ((await readBody(ctx, SESSION_API_LIMITS.maxReleaseBodyBytes)) === null) throw invalid(`the request body exceeds ${SESSION_API_LIMITS.maxReleaseBodyBytes} bytes`);
      const room = (ctx as unknown as { params: { room: string } }).params.room;
      return { released: ROOM_NAME.test(room) ? await sessions.release(room) : 0 };
    }),
  );
}
