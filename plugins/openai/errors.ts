/** Errors of the OpenAI plugin: a `ProviderError` with the codes of each service. */
import { APIConnectionError, APIError, APIUserAbortError } from 'openai';
import { abortError } from '../../core/clock.ts';
import { ProviderError, codeForHttpStatus } from '../../core/provider-error.ts';

export type OpenAILLMErrorCode = 'key_missing' | 'auth_failed' | 'bad_request' | 'rate_limited' | 'provider_error' | 'connection_lost' | 'invalid_response' | 'timeout';

export class OpenAILLMError extends ProviderError<OpenAILLMErrorCode> {
  constructor(code: OpenAILLMErrorCode, message: string, status?: number, options?: { cause?: unknown }) {
    super(code, message, { status, cause: options?.cause });
  }
}

/** Speech-to-text and text-to-speech (`stt:openai`, `tts:openai`). */
export type OpenAIAudioErrorCode = 'key_missing' | 'auth_failed' | 'bad_request' | 'rate_limited' | 'provider_error' | 'connect_failed' | 'connection_lost' | 'invalid_response' | 'timeout';

export class OpenAIAudioError extends ProviderError<OpenAIAudioErrorCode> {
  constructor(code: OpenAIAudioErrorCode, message: string, status?: number, options?: { cause?: unknown }) {
    super(code, message, { status, cause: options?.cause });
  }
}

/**
 * An openai SDK failure of an audio request as our error: `what` names the request ("speech
 * request", "transcription request"). Aborts become an `AbortError`.
 */
export function audioRequestError(err: unknown, what: string, signal: AbortSignal | undefined, aborted: string): Error {
  if (signal?.aborted || err instanceof APIUserAbortError) return abortError(aborted);
  if (err instanceof OpenAIAudioError) return err;
  if (err instanceof APIConnectionError) return new OpenAIAudioError('connection_lost', `the ${what} did not reach the server or was cut: ${err.message}`, undefined, { cause: err });
  if (err instanceof APIError && err.status !== undefined) {
    return new OpenAIAudioError(codeForHttpStatus(err.status), `the ${what} failed (${err.status}): ${err.message}`, err.status, { cause: err });
  }
  const message = err instanceof Error ? err.message : String(err);
  return new OpenAIAudioError('connection_lost', `the ${what} broke: ${message}`, undefined, { cause: err });
}
