/** Errors of the Deepgram plugin, with a `code` the STT processor can switch on. */
export type DeepgramSTTErrorCode = 'auth_failed' | 'bad_request' | 'connect_failed' | 'connection_lost' | 'timeout';

export class DeepgramSTTError extends Error {
  constructor(
    readonly code: DeepgramSTTErrorCode,
    message: string,
    /** WebSocket close code, or HTTP status of a refused handshake. */
    readonly status?: number,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'DeepgramSTTError';
  }
}

/** The ws library reports a refused handshake as "Unexpected server response: <status>". */
export function handshakeError(message: string): DeepgramSTTError {
  const status = Number(/Unexpected server response: (\d{3})/.exec(message)?.[1]);
  if (status === 401 || status === 403) {
    return new DeepgramSTTError('auth_failed', `Deepgram refused the credentials (HTTP ${status}); check the API key`, status);
  }
  if (status >= 400 && status < 500) {
    return new DeepgramSTTError('bad_request', `Deepgram refused the connection parameters (HTTP ${status})`, status);
  }
  if (message === 'TIMEOUT') return new DeepgramSTTError('timeout', 'timed out connecting to Deepgram');
  return new DeepgramSTTError('connect_failed', `could not connect to Deepgram: ${message}`, Number.isFinite(status) ? status : undefined);
}
