/** Errors of the OpenAI plugin: a `ProviderError` with the LLM's codes. */
import { ProviderError } from '../../core/provider-error.ts';

export type OpenAILLMErrorCode = 'auth_failed' | 'bad_request' | 'rate_limited' | 'provider_error' | 'connection_lost' | 'invalid_response';

export class OpenAILLMError extends ProviderError<OpenAILLMErrorCode> {
  constructor(code: OpenAILLMErrorCode, message: string, status?: number, options?: { cause?: unknown }) {
    super(code, message, { status, cause: options?.cause });
  }
}
