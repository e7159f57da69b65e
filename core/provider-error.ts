/**
 * ProviderError: the one error shape of every engine a plugin wraps (speech-to-text, language
 * model, text-to-speech, speech-to-speech, offline engines). Plugins extend it with their own
 * `code` union; processors read `code` (for the error frame: `llm_rate_limited`, ...) and
 * `retryable` (whether trying again can help) through `instanceof`, never by duck-typing.
 *
 * `retryable` is the plugin's judgement of the failure, not of the request: a refused key or a
 * malformed request fails the same way again (false); a dropped connection, a timeout, a rate
 * limit or the provider's own 5xx may not (true).
 */

/** Codes every plugin shares; a plugin adds its own (`config_not_found`, `unknown_voice`, ...). */
export type ProviderErrorCode =
  | 'auth_failed'
  | 'bad_request'
  | 'rate_limited'
  | 'provider_error'
  | 'connect_failed'
  | 'connection_lost'
  | 'invalid_response'
  | 'timeout';

export interface ProviderErrorOptions {
  /** HTTP status of the refused request, or WebSocket close code. */
  readonly status?: number;
  /** Default: `defaultRetryable(code)`. */
  readonly retryable?: boolean;
  readonly cause?: unknown;
}

/** Whether a failure with this code may succeed when tried again, for the shared codes. */
export function defaultRetryable(code: string): boolean {
  switch (code) {
    case 'rate_limited':
    case 'provider_error':
    case 'connect_failed':
    case 'connection_lost':
    case 'timeout':
      return true;
    default:
      return false;
  }
}

/** The shared code for an HTTP status a provider answered with. */
export function codeForHttpStatus(status: number): 'auth_failed' | 'rate_limited' | 'bad_request' | 'provider_error' {
  if (status === 401 || status === 403) return 'auth_failed';
  if (status === 429) return 'rate_limited';
  if (status >= 400 && status < 500) return 'bad_request';
  return 'provider_error';
}

export class ProviderError<C extends string = string> extends Error {
  readonly code: C;
  readonly status: number | undefined;
  readonly retryable: boolean;

  constructor(code: C, message: string, options: ProviderErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.status = options.status;
    this.retryable = options.retryable ?? defaultRetryable(code);
  }
}
