/**
 * What `npm start` says about speech at start-up: the deployment's speech-to-text provider and why
 * (`SVC_STT_PROVIDER`, else the first cloud key, else `local`), and for each text-to-speech
 * provider an agent may pick (`tts_provider`) whether it can start. A provider "can start" when
 * its plugin builds it from the environment: each plugin refuses with `key_missing` when its key
 * is not there, and a session that picks it would fail to start with `<kind>_key_missing`.
 */
import { ProviderError } from '../core/provider-error.ts';
import type { Registry } from '../core/registry.ts';

export interface SpeechProvidersReport {
  /** Lines for the start-up banner. */
  readonly lines: string[];
  /** A configuration error: the process should not start. */
  readonly error?: string;
}

/** Why `kind:slug` cannot start from this environment, or undefined when it can. */
function startProblem(registry: Registry, kind: string, slug: string): string | undefined {
  if (slug === 'local') return undefined; // offline engines need no key
  try {
    registry.create(kind, slug);
    return undefined;
  } catch (err) {
    if (err instanceof ProviderError && err.code === 'key_missing') return err.message;
    return undefined; // other refusals show per session, with their own reason
  }
}

export function speechProvidersReport(registry: Registry, stt: { readonly slug: string; readonly reason: string }): SpeechProvidersReport {
  const installed = registry.slugs('stt');
  if (!installed.includes(stt.slug)) {
    return { lines: [], error: `SVC_STT_PROVIDER=${stt.slug} is not an installed speech-to-text provider (installed: ${installed.join(', ')})` };
  }
  const sttProblem = startProblem(registry, 'stt', stt.slug);
  const lines = [`  Speech:     speech-to-text ${stt.slug} (${stt.reason})${sttProblem ? ` -- CANNOT START: ${sttProblem}; every session will fail (stt_key_missing)` : ''}`];
  const voices = registry.slugs('tts').map((slug) => {
    const problem = startProblem(registry, 'tts', slug);
    return problem ? `${slug} (no key: agents using it fail to start, tts_key_missing)` : slug;
  });
  lines.push(`  Voices:     text-to-speech per agent (tts_provider): ${voices.join(', ')}`);
  return { lines };
}
