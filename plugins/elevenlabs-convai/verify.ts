import { ElevenLabsClient, ElevenLabsError } from 'elevenlabs';

export interface ConvaiVerifyInput {
  apiKey: string;
  /** The ElevenLabs agent id (`sts_config_id`). */
  configId: string | null;
  providerConfig: Record<string, unknown>;
}

/**
 * Live credential check: reads the agent (`GET /v1/convai/agents/{agent_id}`) with the stored
 * key through the SDK. A 401 means a bad key, a 404 (or 422) an agent the key cannot use; both
 * are answers (`valid: false`), not failures. Starts no conversation (costs nothing).
 */
export async function verifyConvaiCredentials(input: ConvaiVerifyInput, options: { baseUrl: string; timeoutMs: number }): Promise<{ valid: boolean; error?: string }> {
  const agentId = input.configId?.trim();
  if (!agentId) return { valid: false, error: 'sts_config_id must be the ElevenLabs agent id' };
  const client = new ElevenLabsClient({ apiKey: input.apiKey, baseUrl: options.baseUrl });
  try {
    await client.conversationalAi.getAgent(agentId, { maxRetries: 0, timeoutInSeconds: options.timeoutMs / 1000 });
    return { valid: true };
  } catch (err) {
    if (err instanceof ElevenLabsError && err.statusCode !== undefined) {
      const body = err.body as any;
      const detail = typeof body?.detail === 'object' && body.detail && !Array.isArray(body.detail) ? `${body.detail.message} (${body.detail.status})` : JSON.stringify(body);
      if (err.statusCode === 401 || err.statusCode === 403) return { valid: false, error: `authentication failed: ${detail}` };
      if (err.statusCode === 404 || err.statusCode === 422) return { valid: false, error: `agent "${agentId}" not available: ${detail}` };
      return { valid: false, error: `provider answered ${err.statusCode}: ${detail}` };
    }
    return { valid: false, error: `provider unreachable: ${(err as Error).message}` };
  }
}
