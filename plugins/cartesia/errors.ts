/** Errors of the Cartesia plugin: a `ProviderError` with the TTS's codes. */
import { ProviderError, codeForHttpStatus } from '../../core/provider-error.ts';

export type CartesiaTTSErrorCode = 'key_missing' | 'auth_failed' | 'bad_request' | 'rate_limited' | 'provider_error' | 'connect_failed' | 'connection_lost' | 'invalid_response' | 'timeout';

export class CartesiaTTSError extends ProviderError<CartesiaTTSErrorCode> {
  constructor(code: CartesiaTTSErrorCode, message: string, status?: number, options?: { cause?: unknown }) {
    super(code, message, { status, cause: options?.cause });
  }
}

/** A refused handshake: the `ws` library reports it as "Unexpected server response: <status>". */
export function handshakeError(message: string): CartesiaTTSError {
  const status = Number(/Unexpected server response: (\d{3})/.exec(message)?.[1]);
  if (!Number.isFinite(status)) return new CartesiaTTSError('connect_failed', `could not connect to Cartesia: ${message}`);
  const code = codeForHttpStatus(status);
  const what = { auth_failed: 'Cartesia refused the credentials; check the API key', rate_limited: 'Cartesia is rate limiting this key', bad_request: 'Cartesia refused the connection parameters', provider_error: 'Cartesia could not take the connection' }[code];
  return new CartesiaTTSError(code === 'provider_error' ? 'connect_failed' : code, `${what} (HTTP ${status})`, status);
}

/** An `error` message of a generation (`status_code`, `title`, `message`, `error_code`). */
export function generationError(e: { status_code?: number; title?: string; message?: string; error_code?: string }): CartesiaTTSError {
  const status = typeof e.status_code === 'number' ? e.status_code : 500;
  const detail = [e.title, e.message].filter(Boolean).join(': ') || 'no detail';
  return new CartesiaTTSError(codeForHttpStatus(status), `Cartesia refused the generation (${status}${e.error_code ? ` ${e.error_code}` : ''}): ${detail}`, status);
}
