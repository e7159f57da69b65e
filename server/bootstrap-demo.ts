import type { ApiKeys } from './services/api-keys.ts';
import type { Organizations } from './services/organizations.ts';

export const DEMO_ORGANIZATION = { name: 'demo', keyLabel: 'first-start key' } as const;

/** On an empty database, creates the demo organization and returns its first key (shown once). */
export async function bootstrapDemo(organizations: Organizations, apiKeys: ApiKeys): Promise<{ organization: string; key: string } | null> {
  if ((await organizations.countCustomers()) > 0) return null;
  const created = await apiKeys.create(DEMO_ORGANIZATION.name, DEMO_ORGANIZATION.keyLabel);
  return { organization: created.organization, key: created.key };
}
