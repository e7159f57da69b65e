/**
 * Session API errors leave the server as `{ error_code, message }` (spec "Errors: Session API"),
 * not the REST shape: the widget and site backends switch on `error_code`. `concurrency_limit`
 * and `server_busy` add `retry_after_seconds` (and a `Retry-After` header).
 */
export const SESSION_ERROR_STATUS = {
  /** Decision: malformed JSON, a non-object body, a wrong type. */
  invalid_request: 400,
  /** Decision: a body over the route's cap; answered unread, and the connection closed (issue 32). */
  payload_too_large: 413,
  /** Decision: a connect body whose Content-Type is not JSON. */
  unsupported_media_type: 415,
  agent_not_found: 404,
  agent_unpublished: 403,
  auth_failed: 403,
  concurrency_limit: 429,
  room_creation_failed: 502,
  orchestrator_error: 502,
  /** Decision: this server process has no capacity left for another bot (not the agent's limit). */
  server_busy: 503,
  internal_error: 500,
} as const;

export type SessionErrorCode = keyof typeof SESSION_ERROR_STATUS;

export class SessionError extends Error {
  readonly status: number;
  constructor(
    readonly code: SessionErrorCode,
    message: string,
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
    this.name = 'SessionError';
    this.status = SESSION_ERROR_STATUS[code];
  }

  toBody(): { error_code: string; message: string; retry_after_seconds?: number } {
    return this.retryAfterSeconds === undefined
      ? { error_code: this.code, message: this.message }
      : { error_code: this.code, message: this.message, retry_after_seconds: this.retryAfterSeconds };
  }
}
