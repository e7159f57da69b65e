import OpenAI from 'openai';

export interface VerifyCredentialsInput {
  apiKey: string;
  /** The model to check (`sts_config_id`); the plugin default when null. */
  configId: string | null;
  providerConfig: Record<string, unknown>;
}

export interface VerifyCredentialsOptions {
  /** OpenAI-compatible base URL; deployment configuration, never taken from agent data (SSRF). */
  baseURL?: string;
  defaultModel: string;
  timeoutMs: number;
}

/**
 * Live credential check: retrieves the configured model with the stored key. A 401 means a bad
 * key, a 404 an unknown model; both are answers (`valid: false`), not failures.
 */
export async function verifyCredentials(input: VerifyCredentialsInput, options: VerifyCredentialsOptions): Promise<{ valid: boolean; error?: string }> {
  const client = new OpenAI({ apiKey: input.apiKey, baseURL: options.baseURL, maxRetries: 0, timeout: options.timeoutMs });
  const model = input.configId || options.defaultModel;
  try {
    await client.models.retrieve(model);
    return { valid: true };
  } catch (err) {
    if (err instanceof OpenAI.APIError && err.status === 401) return { valid: false, error: `authentication failed: ${err.message}` };
    if (err instanceof OpenAI.APIError && err.status === 404) return { valid: false, error: `model "${model}" not available: ${err.message}` };
    if (err instanceof OpenAI.APIError && err.status) return { valid: false, error: `provider answered ${err.status}: ${err.message}` };
    return { valid: false, error: `provider unreachable: ${(err as Error).message}` };
  }
}
