/**
 * OpenAI Realtime as a speech-to-speech provider: registers `sts:openai-realtime`, whose factory
 * returns an `S2SService` (the live conversation, `realtime-service.ts`), with the catalogue
 * descriptor the REST API lists (GET /v1/agents/providers) and a live `verify` used by
 * POST /v1/agents/{id}/verify-provider. See docs/third-party.md.
 */
import { resolveOptions } from '../../core/options.ts';
import type { Plugin } from '../../core/registry.ts';
import type { S2SService } from '../../processors/s2s/s2s-service.ts';
import { OpenAIRealtimeS2SService, OPENAI_REALTIME_SESSION_DEFAULTS, type OpenAIRealtimeServiceOptions } from './realtime-service.ts';
import { verifyCredentials, type VerifyCredentialsInput } from './verify.ts';

export { OpenAIRealtimeS2SService, OPENAI_REALTIME_SESSION_DEFAULTS, sessionUpdate, type OpenAIRealtimeServiceOptions } from './realtime-service.ts';

export const OPENAI_REALTIME_DEFAULTS = {
  /** Model used when the agent has no sts_config_id. */
  model: OPENAI_REALTIME_SESSION_DEFAULTS.model,
  /** A verification waits at most this long for OpenAI. */
  verifyTimeoutMs: 10_000,
} as const;

export interface OpenAIRealtimePluginOptions {
  /** Base URL of the OpenAI REST API; default OPENAI_BASE_URL or the SDK default. The socket uses its host over wss://. */
  baseURL?: string;
  /** Extra TLS trust for the realtime socket (a self-hosted server with its own certificate). */
  tls?: OpenAIRealtimeServiceOptions['tls'];
  defaultModel?: string;
  verifyTimeoutMs?: number;
  connectTimeoutMs?: number;
}

export function createOpenAIRealtimePlugin(options: OpenAIRealtimePluginOptions = {}): Plugin {
  const { model, verifyTimeoutMs } = resolveOptions(OPENAI_REALTIME_DEFAULTS, { model: options.defaultModel, verifyTimeoutMs: options.verifyTimeoutMs });
  const verifyOptions = () => ({
    baseURL: options.baseURL ?? process.env.OPENAI_BASE_URL ?? undefined,
    defaultModel: model,
    timeoutMs: verifyTimeoutMs,
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
      registry.register<S2SService, OpenAIRealtimeServiceOptions>(
        'sts',
        descriptor.slug,
        (o = {}) =>
          new OpenAIRealtimeS2SService({
            baseURL: options.baseURL,
            tls: options.tls,
            defaultModel: options.defaultModel,
            connectTimeoutMs: options.connectTimeoutMs,
            ...o,
          }),
        { label: descriptor.label, descriptor },
      );
    },
  };
}

export const openaiRealtimePlugin = createOpenAIRealtimePlugin();
export default openaiRealtimePlugin;
