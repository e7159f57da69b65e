/** Errors of the ElevenLabs plugin: a `ProviderError` with the TTS's codes. */
import { ProviderError } from '../../core/provider-error.ts';

export type ElevenLabsTTSErrorCode = 'key_missing' | 'auth_failed' | 'quota_exceeded' | 'bad_request' | 'rate_limited' | 'provider_error' | 'connection_lost' | 'invalid_response' | 'timeout';

export class ElevenLabsTTSError extends ProviderError<ElevenLabsTTSErrorCode> {
  constructor(code: ElevenLabsTTSErrorCode, message: string, status?: number, options?: { cause?: unknown }) {
    super(code, message, { status, cause: options?.cause });
  }
}
