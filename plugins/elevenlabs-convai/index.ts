/**
 * ElevenLabs Conversational AI as a speech-to-speech provider: registers
 * `sts:elevenlabs-convai`, whose factory returns an `S2SService` (`convai-service.ts`), with its
 * catalogue descriptor and a live `verify`. `sts_config_id` is the ElevenLabs agent id.
 * See docs/third-party.md.
 */
import { resolveOptions } from '../../core/options.ts';
import type { Plugin } from '../../core/registry.ts';
import type { S2SService } from '../../processors/s2s/s2s-service.ts';
import { ElevenLabsConvaiS2SService, ELEVENLABS_CONVAI_DEFAULTS, type ElevenLabsConvaiServiceOptions } from './convai-service.ts';
import { verifyConvaiCredentials, type ConvaiVerifyInput } from './verify.ts';

export { ElevenLabsConvaiS2SService, ELEVENLABS_CONVAI_DEFAULTS, initiation, type ElevenLabsConvaiServiceOptions } from './convai-service.ts';

export const ELEVENLABS_CONVAI_PLUGIN_DEFAULTS = {
  /** A verification waits at most this long for ElevenLabs. */
  verifyTimeoutMs: 10_000,
} as const;

export interface ElevenLabsConvaiPluginOptions {
  /** REST base URL; default ELEVENLABS_BASE_URL or https://api.elevenlabs.io. The socket URL comes signed from it. */
  baseUrl?: string;
  connectTimeoutMs?: number;
  turnGapMs?: number;
  verifyTimeoutMs?: number;
}

export function createElevenLabsConvaiPlugin(options: ElevenLabsConvaiPluginOptions = {}): Plugin {
  const { verifyTimeoutMs } = resolveOptions(ELEVENLABS_CONVAI_PLUGIN_DEFAULTS, options);
  const baseUrl = () => options.baseUrl ?? process.env.ELEVENLABS_BASE_URL ?? ELEVENLABS_CONVAI_DEFAULTS.baseUrl;
  const descriptor = {
    slug: 'elevenlabs-convai',
    label: 'ElevenLabs Conversational AI',
    required_persisted: [] as string[],
    optional_persisted: ['override_agent_settings', 'dynamic_variables', 'user_id'],
    session_fields: ['prompt', 'first_message', 'language', 'voice_id'],
    status: 'available',
    verify: (input: ConvaiVerifyInput) => verifyConvaiCredentials(input, { baseUrl: baseUrl(), timeoutMs: verifyTimeoutMs }),
  };
  return {
    name: 'elevenlabs-convai',
    register(registry) {
      registry.register<S2SService, ElevenLabsConvaiServiceOptions>(
        'sts',
        descriptor.slug,
        (o = {}) => new ElevenLabsConvaiS2SService({ baseUrl: baseUrl(), connectTimeoutMs: options.connectTimeoutMs, turnGapMs: options.turnGapMs, ...o }),
        { label: descriptor.label, descriptor },
      );
    },
  };
}

export const elevenlabsConvaiPlugin = createElevenLabsConvaiPlugin();
export default elevenlabsConvaiPlugin;
