/** Errors of the offline engines, with a `code` callers can switch on. */
export type LocalEngineErrorCode =
  | 'unsupported_language'
  | 'unknown_voice'
  | 'unsupported_sample_rate'
  | 'invalid_options'
  | 'engine_failure';

export class LocalEngineError extends Error {
  constructor(
    readonly code: LocalEngineErrorCode,
    message: string,
    readonly details: Readonly<Record<string, unknown>> = {},
  ) {
    super(message);
    this.name = 'LocalEngineError';
  }
}
