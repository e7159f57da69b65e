/**
 * OpenAI Realtime as a speech-to-speech provider: registers `sts:openai-realtime` with the
 * catalogue descriptor the REST API lists (GET /v1/agents/providers) and a live `verify`
 * used by POST /v1/agents/{id}/verify-provider. The live speech session itself is not part of
 * this plugin yet; the factory returns the provider handle with its descriptor and verify.
 */
import type { Plugin } from '../../core/registry.ts';
import { verifyCredentials, type VerifyCredentialsInput } from './verify.ts';

export const OPENAI_REALTIME_DEFAULTS = {
  /** Model checked when the agent has no sts_config_id. */
  model: 'gpt-realtime',
  /** A verification waits at most this long for OpenAI. */
  verifyTimeoutMs: 10_000,
} as const;

export interface OpenAIRealtimePluginOptions {
  /** Base URL of the OpenAI REST API; default OPENAI_BASE_URL or the SDK default. */
  baseURL?: string;
  defaultModel?: string;
  verifyTimeoutMs?: number;
}

export function createOpenAIRealtimePlugin(options: OpenAIRealtimePluginOptions = {}): Plugin {
  const verifyOptions = () => ({
    baseURL: options.baseURL ?? process.env.OPENAI_BASE_URL ?? undefined,
    defaultModel: options.defaultModel ?? OPENAI_REALTIME_DEFAULTS.model,
    timeoutMs: options.verifyTimeoutMs ?? OPENAI_REALTIME_DEFAULTS.verifyTimeoutMs,
  });
  const descriptor = {
    slug: 'openai-realtime',
    label: 'OpenAI Realtime',
    required_persisted: [] as string[],
    optional_persisted: ['voice', 'temperature', 'turn_detection'],
    session_fields: ['instructions', 'voice'],
    status: 'available',
    verify: (input: VerifyCredentialsInput) => verifyCredentials(input, verifyOptions()),
  };
  return {
    name: 'openai-realtime',
    register(registry) {
      registry.register('sts', descriptor.slug, () => ({ descriptor, verify: descriptor.verify }), { label: descriptor.label, descriptor });
    },
  };
}

export const openaiRealtimePlugin = createOpenAIRealtimePlugin();
export default openaiRealtimePlugin;
