/**
 * What `npm start` says about speech at start-up: the deployment's speech-to-text provider and why
 * (`SVC_STT_PROVIDER`, else the first cloud key, else `local`), and for each text-to-speech
 * provider an agent may pick (`tts_provider`) whether it can start. A provider "can start" when
 * its plugin builds it from the environment: each plugin refuses with `key_missing` when its key
 * is not there, and a session that picks it would fail to start with `<kind>_key_missing`.
 */
import { ProviderError } from '../core/provider-error.ts';
import type { Registry } from '../core/registry.ts';
import type { ProviderChoice } from '../agent/agent-pipeline.ts';

export interface SpeechProvidersReport {
  /** Lines for the start-up banner. */
  readonly lines: string[];
  /** A configuration error: the process should not start. */
  readonly error?: string;
}

/** What `kind:slug` refuses to start with from this environment (its key missing, an option it refuses), or undefined. */
function startRefusal(registry: Registry, kind: string, slug: string, options?: Record<string, unknown>): ProviderError | undefined {
  if (slug === 'local') return undefined; // offline engines need no key
  try {
    registry.create(kind, slug, options);
    return undefined;
  } catch (err) {
    return err instanceof ProviderError ? err : undefined; // other refusals show per session, with their own reason
  }
}

/** The missing key a refusal names (its message), or undefined for any other refusal or none. */
function keyProblem(refusal: ProviderError | undefined): string | undefined {
  return refusal?.code === 'key_missing' ? refusal.message : undefined;
}

/** The options of the deployment's speech-to-text (`SVC_STT_MODEL`'s model: config/env.ts puts it there). */
export function sttOptionsOf(providers: ProviderChoice): Readonly<Record<string, unknown>> | undefined {
  return providers.options?.[`stt:${providers.stt}`];
}

/** The model `SVC_STT_MODEL` set for the deployment's speech-to-text. */
export function sttModelOf(providers: ProviderChoice): string | undefined {
  const model = sttOptionsOf(providers)?.model;
  return typeof model === 'string' ? model : undefined;
}

export function speechProvidersReport(registry: Registry, stt: { readonly slug: string; readonly reason: string; readonly model?: string | undefined }): SpeechProvidersReport {
  const installed = registry.slugs('stt');
  if (!installed.includes(stt.slug)) {
    return { lines: [], error: `SVC_STT_PROVIDER=${stt.slug} is not an installed speech-to-text provider (installed: ${installed.join(', ')})` };
  }
  const refusal = startRefusal(registry, 'stt', stt.slug, stt.model === undefined ? undefined : { model: stt.model });
  // A model the plugin itself refuses (moonshine knows two) would fail every session: not a start.
  if (stt.model !== undefined && refusal?.code === 'invalid_options') return { lines: [], error: `SVC_STT_MODEL=${stt.model} is refused by speech-to-text ${stt.slug}: ${refusal.message}` };
  const sttProblem = keyProblem(refusal);
  const lines = [`  Speech:     speech-to-text ${stt.slug}${stt.model ? ` model ${stt.model}` : ''} (${stt.reason}${stt.model ? ', SVC_STT_MODEL' : ''})${sttProblem ? ` -- CANNOT START: ${sttProblem}; every session will fail (stt_key_missing)` : ''}`];
  const voices = registry.slugs('tts').map((slug) => {
    const problem = keyProblem(startRefusal(registry, 'tts', slug));
    return problem ? `${slug} (no key: agents using it fail to start, tts_key_missing)` : slug;
  });
  lines.push(`  Voices:     text-to-speech per agent (tts_provider): ${voices.join(', ')}`);
  return { lines };
}
