/**
 * Every REST error leaves the server as `{ code, message, details? }` (spec "Errors").
 * Codes are stable; docs/decisions-rest.md lists them with their statuses.
 */
export const ERROR_STATUS = {
  validation_failed: 400,
  invalid_json: 400,
  unsupported_media_type: 415,
  payload_too_large: 413,
  /** The client sent a malformed HTTP message (Node's parser refused it: bad request line, bad chunking). */
  bad_request: 400,
  /** The client closed the connection before its request body ended (logged as 499, never answered). */
  request_aborted: 400,
  /** Request headers did not arrive within `headersTimeoutMs`, or the body within `requestTimeoutMs`. */
  request_timeout: 408,
  /** Request headers larger than Node's `maxHeaderSize` (16 KiB). */
  headers_too_large: 431,
  unauthorized: 401,
  forbidden: 403,
  template_read_only: 403,
  agent_unpublished: 403,
  not_found: 404,
  route_not_found: 404,
  model_variant_not_found: 404,
  model_config_not_found: 404,
  asset_not_found: 404,
  agent_not_found: 404,
  upload_not_found: 404,
  job_not_found: 404,
  generator_not_found: 404,
  method_not_allowed: 405,
  range_not_satisfiable: 416,
  title_conflict: 409,
  model_config_in_use: 409,
  agent_has_active_sessions: 409,
  upload_conflict: 409,
  invalid_signature: 403,
  url_expired: 403,
  /** Avatar sessions (docs/livekit-agents.md): the LiveKit token or room URL cannot work, the join failed, no capacity. */
  livekit_token_invalid: 400,
  livekit_token_expired: 400,
  livekit_url_not_allowed: 400,
  livekit_join_failed: 502,
  avatar_session_not_found: 404,
  /** An organization has `SVC_JOB_MAX_QUEUED` generation jobs waiting already (docs/jobs.md). */
  too_many_jobs: 429,
  internal_error: 500,
  /** The database is unreachable, saturated (no pool connection in time) or a lock/statement timed out; `Retry-After` set. */
  service_unavailable: 503,
  /** This server is shutting down (or full): retry on another (`Retry-After`); a /realtime upgrade during shutdown. */
  server_busy: 503,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

export class ApiError extends Error {
  readonly status: number;
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
    this.name = 'ApiError';
    this.status = ERROR_STATUS[code];
  }

  toBody(): { code: string; message: string; details?: Record<string, unknown> } {
    return this.details ? { code: this.code, message: this.message, details: this.details } : { code: this.code, message: this.message };
  }
}

export const notFound = (code: ErrorCode, what: string, id: string) =>
  new ApiError(code, `${what} ${id} not found`, { id });
