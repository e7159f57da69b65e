/**
 * Errors of the offline engines: a `ProviderError` with the engines' codes. Nothing here is
 * retryable: the same input fails the same way on an engine that runs in this process.
 */
import { ProviderError } from '../../core/provider-error.ts';

export type LocalEngineErrorCode =
  | 'unsupported_language'
  | 'unknown_voice'
  | 'unsupported_sample_rate'
  | 'invalid_options'
  | 'engine_failure';

export class LocalEngineError extends ProviderError<LocalEngineErrorCode> {
  constructor(
    code: LocalEngineErrorCode,
    message: string,
    readonly details: Readonly<Record<string, unknown>> = {},
  ) {
    super(code, message, { retryable: false });
  }
}
