import type { Registry } from '../../core/registry.ts';

/** Registry kind of speech-to-speech provider plugins (`sts:openai-realtime`). */
export const STS_KIND = 'sts';

export interface StsVerifyInput {
  apiKey: string;
  configId: string | null;
  providerConfig: Record<string, unknown>;
}

export interface StsVerifyResult {
  valid: boolean;
  error?: string;
}

/**
 * What an `sts` plugin puts in its registry descriptor: the catalogue fields of the spec's
 * provider descriptor, and optionally `verify`, a live credential check against the vendor.
 */
export interface StsProviderDescriptor {
  slug: string;
  label: string;
  required_persisted: string[];
  optional_persisted: string[];
  session_fields: string[];
  status: string;
  verify?: (input: StsVerifyInput) => Promise<StsVerifyResult>;
}

export function listProviders(registry: Registry) {
  return registry.list(STS_KIND).map((entry) => {
    const d = (entry.descriptor ?? {}) as Partial<StsProviderDescriptor>;
    return {
      slug: entry.slug,
      label: d.label ?? entry.label ?? entry.slug,
      required_persisted: d.required_persisted ?? [],
      optional_persisted: d.optional_persisted ?? [],
      session_fields: d.session_fields ?? [],
      status: d.status ?? 'available',
    };
  });
}

export function providerVerifier(registry: Registry, slug: string): StsProviderDescriptor['verify'] | undefined {
  if (!registry.has(STS_KIND, slug)) return undefined;
  const verify = (registry.info(STS_KIND, slug).descriptor as Partial<StsProviderDescriptor> | undefined)?.verify;
  return typeof verify === 'function' ? verify : undefined;
}
