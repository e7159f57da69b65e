/** Errors of the OpenAI plugin, with a `code` the LLM processor can switch on. */
export type OpenAILLMErrorCode =
  | 'auth_failed'
  | 'bad_request'
  | 'rate_limited'
  | 'provider_error'
  | 'connection_lost'
  | 'invalid_response';

export class OpenAILLMError extends Error {
  constructor(
    readonly code: OpenAILLMErrorCode,
    message: string,
    readonly status?: number,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'OpenAILLMError';
  }
}

/** Maps an HTTP status from the API to our code. */
export function codeForStatus(status: number): OpenAILLMErrorCode {
  if (status === 401 || status === 403) return 'auth_failed';
  if (status === 429) return 'rate_limited';
  if (status >= 400 && status < 500) return 'bad_request';
  return 'provider_error';
}
