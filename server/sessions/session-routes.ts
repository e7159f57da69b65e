/**
 * The Session API's two public routes (spec "Public", "Start-session request", "Errors: Session
 * API"), declared like every route (`RouteSpec`): the spec drives body reading, validation and
 * the OpenAPI entries, and its `errorBody` hook answers every error, the shared machinery's
 * (415, 413, invalid JSON, validation) and the handler's, in the Session API's
 * `{error_code, message}` shape. CORS and preflights for /v1/public/* come from the server's
 * response-headers middleware.
 */
import type Router from '@koa/router';
import type { Context } from 'koa';
import type { Logger } from 'pino';
import type { ApiError } from '../http/api-error.ts';
import type { ApiRoutes, JsonSchema, RouteResult, RouteSpec } from '../http/api-routes.ts';
import type { LiveSessions } from './live-sessions.ts';
import { SessionError, type SessionErrorCode } from './session-errors.ts';
import { SERVER_DEFAULTS } from '../config/server-config.ts';
import { isDatabaseUnavailable } from '../db/connect.ts';

export const SESSION_API_LIMITS = {
  /** Largest connect body (the fields need a few hundred bytes). */
  maxConnectBodyBytes: 16 * 1024,
  /** Largest release body read (and ignored): a beacon may carry a little text. */
  maxReleaseBodyBytes: 64 * 1024,
  maxClientUserRefLength: 256,
  maxAgentIdLength: 128,
} as const;

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

/** Every Session API answer, success or error. */
const SESSION_HEADERS = { 'Cache-Control': 'private, no-store', 'Access-Control-Expose-Headers': 'Retry-After' } as const;

/** The shared machinery's errors (body, media type, validation) in the Session API's shape. */
function sessionErrorBody(error: ApiError): { status: number; body: unknown; headers: Record<string, string> } {
  const code: SessionErrorCode =
    error.code === 'unsupported_media_type' || error.code === 'payload_too_large' ? error.code : error.status < 500 ? 'invalid_request' : 'internal_error';
  return answerOf(new SessionError(code, code === 'internal_error' ? 'internal server error' : error.message));
}

function answerOf(error: SessionError): { status: number; body: unknown; headers: Record<string, string> } {
  const headers: Record<string, string> = { ...SESSION_HEADERS };
  if (error.retryAfterSeconds !== undefined) headers['Retry-After'] = String(error.retryAfterSeconds);
  return { status: error.status, body: error.toBody(), headers };
}

export const SESSION_ROUTE_SPECS: RouteSpec[] = [
  {
    method: 'post', path: '/public/agents/connect', operationId: 'connectAgent', tag: 'Session API', auth: 'public',
    maxBodyBytes: SESSION_API_LIMITS.maxConnectBodyBytes, errorBody: sessionErrorBody,
    summary: 'Start a live session with a published agent',
    description: 'Checks the Origin against allowed_hostnames, auth_token when auth_enabled, then the agent\'s max_concurrency; creates a WebRTC room and starts the agent in it. Errors are `{error_code, message}` (Session API shape).',
    body: connectBody,
    responses: {
      200: { description: 'Session', schema: { type: 'object', required: ['session_id', 'room_url', 'token'], properties: { session_id: { type: 'string' }, room_url: { type: 'string' }, token: { type: 'string' } } } },
      400: { description: 'invalid_request', schema: sessionError('invalid_request') },
      403: { description: 'agent_unpublished or auth_failed', schema: sessionError('auth_failed') },
      404: { description: 'agent_not_found', schema: sessionError('agent_not_found') },
      413: { description: `payload_too_large (a body over ${SESSION_API_LIMITS.maxConnectBodyBytes} bytes; the connection is closed)`, schema: sessionError('payload_too_large') },
      415: { description: 'unsupported_media_type', schema: sessionError('unsupported_media_type') },
      429: { description: 'concurrency_limit (Retry-After header and retry_after_seconds)', schema: sessionError('concurrency_limit') },
      500: { description: 'internal_error', schema: sessionError('internal_error') },
      502: { description: 'room_creation_failed or orchestrator_error', schema: sessionError('orchestrator_error') },
      503: { description: 'server_busy (this server has no capacity left, or its database is unavailable; Retry-After)', schema: sessionError('server_busy') },
    },
  },
  {
    method: 'post', path: '/public/agents/connect/:room', operationId: 'releaseAgentSession', tag: 'Session API', auth: 'public',
    acceptsBody: 'ignored', maxBodyBytes: SESSION_API_LIMITS.maxReleaseBodyBytes, errorBody: sessionErrorBody,
    summary: 'Release the session of a room',
    description: 'Idempotent: an unknown, ended or already released room gives `released: 0`. Accepts no body or any body (text/plain from navigator.sendBeacon), which is ignored.',
    params: { type: 'object', properties: { room: { type: 'string' } } },
    responses: {
      200: { description: 'How many sessions this call released', schema: { type: 'object', required: ['released'], properties: { released: { type: 'integer', minimum: 0 } } } },
      413: { description: `payload_too_large (a body over ${SESSION_API_LIMITS.maxReleaseBodyBytes} bytes; the connection is closed)`, schema: sessionError('payload_too_large') },
    },
  },
];

/** What the routes call: this process's LiveSessions, or a fleet API process's placement (server/fleet). */
export type SessionRoutesTarget = Pick<LiveSessions, 'connect' | 'release' | 'hold'>;

export function mountSessionRoutes(api: ApiRoutes, router: Router, sessions: SessionRoutesTarget, logger: Logger): void {
  /** Runs the work; a SessionError is the client's answer, anything else a logged internal_error. */
  const respond = async (ctx: Context, work: () => Promise<unknown>): Promise<RouteResult> => {
    // Until its response is written: a shutdown answers it instead of resetting its connection.
    sessions.hold(new Promise<void>((resolve) => ctx.res.once('finish', resolve).once('close', resolve)));
    try {
      return { status: 200, body: await work(), headers: { ...SESSION_HEADERS } };
    } catch (err) {
      if (err instanceof SessionError) return answerOf(err);
      // The database down, restarting or overloaded (a lock or statement timeout): this server
      // cannot decide now, and a retry soon may succeed. 503 server_busy with Retry-After, which
      // the widget waits out and retries, as the REST API answers service_unavailable.
      if (isDatabaseUnavailable(err)) {
        logger.warn({ err, path: ctx.path }, 'session request: the database is unavailable; answered server_busy');
        return answerOf(new SessionError('server_busy', 'the database is unavailable or overloaded; retry later', SERVER_DEFAULTS.retryAfterSeconds));
      }
      logger.error({ err, path: ctx.path }, 'session request failed');
      return answerOf(new SessionError('internal_error', 'internal server error'));
    }
  };
  const [connect, release] = SESSION_ROUTE_SPECS as [RouteSpec, RouteSpec];

  api.add(router, connect, ({ ctx, body, baseUrl }) =>
    respond(ctx, async () => {
      const { agent_id: agentId, client_user_ref: clientUserRef, auth_token: authToken } = body as { agent_id: string; client_user_ref?: string | null; auth_token?: string };
      if (agentId.length > SESSION_API_LIMITS.maxAgentIdLength) throw new SessionError('agent_not_found', 'agent not found');
      // A client that hangs up while its session is admitted and started (a page closed or
      // reloaded) never learns its room, so it cannot release it: released here as soon as it is
      // granted, instead of holding the agent's slot, a room and a bot until the join timeout.
      let gone = false;
      ctx.res.once('close', () => {
        if (!ctx.res.writableFinished) gone = true;
      });
      const grant = await sessions.connect({ agentId, clientUserRef: clientUserRef ?? null, authToken, origin: ctx.get('origin') || undefined, baseUrl });
      if (gone) {
        const room = roomOfGrant(grant.room_url);
        logger.info({ session_id: grant.session_id }, 'the client left before its session was granted: released');
        if (room) await sessions.release(room).catch((err: unknown) => logger.warn({ err, session_id: grant.session_id }, 'could not release a session its client left'));
      }
      return grant;
    }),
  );

  api.add(router, release, ({ ctx, params }) =>
    respond(ctx, async () => ({ released: ROOM_NAME.test(params.room) ? await sessions.release(params.room) : 0 })),
  );
}

/** The room a granted `room_url` names (its `room` parameter), or null. */
function roomOfGrant(roomUrl: string): string | null {
  try {
    const room = new URL(roomUrl).searchParams.get('room');
    return room && ROOM_NAME.test(room) ? room : null;
  } catch {
    return null;
  }
}
