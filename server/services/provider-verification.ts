import type { Registry } from '../../core/registry.ts';
import type { Principal } from '../http/principal.ts';
import type { Agents } from './agents.ts';
import { providerVerifier } from './sts-providers.ts';

export interface VerifyProviderResult {
  valid: boolean;
  provider: string;
  error?: string;
}

/**
 * Live check of an agent's speech-to-speech credentials through its provider plugin.
 * Reads only: the agent is never modified, whatever the outcome.
 */
export async function verifyProvider(agents: Agents, registry: Registry, principal: Principal, agentId: string): Promise<VerifyProviderResult> {
  const { row, apiKey } = await agents.providerKey(principal, agentId);
  const provider: string = row.sts_provider ?? '';
  if (!provider) return { valid: false, provider, error: 'the agent has no sts_provider' };
  const verify = providerVerifier(registry, provider);
  if (!verify) return { valid: false, provider, error: `provider "${provider}" is not installed or cannot be verified` };
  if (!apiKey) return { valid: false, provider, error: 'no sts_api_key is stored for this agent' };
  try {
    const result = await verify({ apiKey, configId: row.sts_config_id, providerConfig: row.provider_config ?? {} });
    return result.valid ? { valid: true, provider } : { valid: false, provider, error: result.error ?? 'provider rejected the credentials' };
  } catch (err) {
    return { valid: false, provider, error: `verification failed: ${(err as Error).message}` };
  }
}
