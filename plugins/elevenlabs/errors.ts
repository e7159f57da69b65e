/** Errors of the ElevenLabs plugin, with a `code` the TTS processor can switch on. */
export type ElevenLabsTTSErrorCode =
  | 'auth_failed'
  | 'bad_request'
  | 'rate_limited'
  | 'provider_error'
  | 'connection_lost'
  | 'invalid_response'
  | 'timeout';

export class ElevenLabsTTSError extends Error {
  constructor(
    readonly code: ElevenLabsTTSErrorCode,
    message: string,
    readonly status?: number,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'ElevenLabsTTSError';
  }
}

export function codeForStatus(status: number): ElevenLabsTTSErrorCode {
  if (status === 401 || status === 403) return 'auth_failed';
  if (status === 429) return 'rate_limited';
  if (status >= 400 && status < 500) return 'bad_request';
  return 'provider_error';
}
