/**
 * How a service processor (STT, LLM, TTS) reports its provider's failure: one policy, shared.
 *
 * - The error frame's code is `<kind>_<ProviderError.code>` (`llm_rate_limited`,
 *   `tts_connection_lost`), or `<kind>_error` for an error that is not a `ProviderError`.
 * - A failure is fatal when the processor can no longer work: the provider refused the
 *   credentials (`auth_failed`: every later request fails the same way), or it answers with
 *   something that is not its protocol (`invalid_response`: a wrong server behind the base URL,
 *   an incompatible version; a bot that would go on mute or deaf is worse than one that ends
 *   with the reason). A fatal error frame makes
 *   the worker cancel the pipeline with that reason, and the session records it as its failure
 *   (`pipeline_error`), instead of leaving a bot that carries on deaf or mute.
 * - Anything else fails one request (one answer, one sentence): it is reported, and the next
 *   turn tries again.
 *
 * The STT processor adds one case of its own: reconnecting failed for good (docs/framework.md).
 */
import { ProviderError } from '../core/provider-error.ts';
import { errorMessage } from '../core/error-message.ts';

export type ServiceKind = 'stt' | 'llm' | 'tts';

export interface ProviderFailure {
  readonly code: string;
  readonly fatal: boolean;
  readonly message: string;
}

/** Codes after which the processor can no longer work (see above). */
/** `quota_exceeded`: the account cannot be used now (out of credits); every later request would fail the same way. */
const FATAL_CODES: ReadonlySet<string> = new Set(['auth_failed', 'invalid_response', 'quota_exceeded']);

export function providerFailure(kind: ServiceKind, err: unknown): ProviderFailure {
  const message = errorMessage(err);
  if (err instanceof ProviderError) return { code: `${kind}_${err.code}`, fatal: FATAL_CODES.has(err.code), message };
  return { code: `${kind}_error`, fatal: false, message };
}
