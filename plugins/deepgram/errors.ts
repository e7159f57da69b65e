/** Errors of the Deepgram plugin: a `ProviderError` with Deepgram's codes. */
import { ProviderError, codeForHttpStatus } from '../../core/provider-error.ts';

export type DeepgramSTTErrorCode = 'key_missing' | 'auth_failed' | 'bad_request' | 'rate_limited' | 'provider_error' | 'connect_failed' | 'connection_lost' | 'timeout';

export class DeepgramSTTError extends ProviderError<DeepgramSTTErrorCode> {
  constructor(
    code: DeepgramSTTErrorCode,
    message: string,
    /** WebSocket close code, or HTTP status of a refused handshake. */
    status?: number,
    options?: { cause?: unknown },
  ) {
    super(code, message, { status, cause: options?.cause });
  }
}

/** The ws library reports a refused handshake as "Unexpected server response: <status>". */
export function handshakeError(message: string): DeepgramSTTError {
  const status = Number(/Unexpected server response: (\d{3})/.exec(message)?.[1]);
  if (message === 'TIMEOUT') return new DeepgramSTTError('timeout', 'timed out connecting to Deepgram');
  if (!Number.isFinite(status)) return new DeepgramSTTError('connect_failed', `could not connect to Deepgram: ${message}`);
  const code = codeForHttpStatus(status);
  switch (code) {
    case 'auth_failed':
      return new DeepgramSTTError(code, `Deepgram refused the credentials (HTTP ${status}); check the API key`, status);
    case 'bad_request':
      return new DeepgramSTTError(code, `Deepgram refused the connection parameters (HTTP ${status})`, status);
    case 'rate_limited':
      return new DeepgramSTTError(code, `Deepgram is rate limiting this key (HTTP ${status})`, status);
    default:
      return new DeepgramSTTError('connect_failed', `could not connect to Deepgram: ${message}`, status);
  }
}

export type DeepgramTTSErrorCode = 'key_missing' | 'auth_failed' | 'bad_request' | 'rate_limited' | 'provider_error' | 'connect_failed' | 'connection_lost' | 'invalid_response' | 'timeout';

/** Errors of `tts:deepgram` (Aura over the speak WebSocket). */
export class DeepgramTTSError extends ProviderError<DeepgramTTSErrorCode> {
  constructor(code: DeepgramTTSErrorCode, message: string, status?: number, options?: { cause?: unknown }) {
    super(code, message, { status, cause: options?.cause });
  }
}

/** A refused speak handshake, with the same reading of the SDK's message as for listening. */
export function speakHandshakeError(message: string): DeepgramTTSError {
  const e = handshakeError(message);
  return new DeepgramTTSError(e.code, e.message, e.status);
}
