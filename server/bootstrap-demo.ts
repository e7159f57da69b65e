import { hostname, networkInterfaces } from 'node:os';
import type { ServiceCore } from './services/open-services.ts';
import { AGENT_DEFAULTS } from './services/agent-defaults.ts';
import type { ApiKeys } from './services/api-keys.ts';
import type { Organizations } from './services/organizations.ts';

export const DEMO_ORGANIZATION = { name: 'demo', keyLabel: 'first-start key' } as const;

/** On an empty database, creates the demo organization and returns its first key (shown once). */
export async function bootstrapDemo(organizations: Organizations, apiKeys: ApiKeys): Promise<{ organization: string; key: string } | null> {
  if ((await organizations.countCustomers()) > 0) return null;
  const created = await apiKeys.create(DEMO_ORGANIZATION.name, DEMO_ORGANIZATION.keyLabel);
  return { organization: created.organization, key: created.key };
}

/** The agent the demo page at `/` talks to (created once, on the first start). */
export const DEMO_AGENT = {
  title: 'Ada (demo)',
  description: 'The demo agent of this server: offline engines unless provider keys are set.',
  system_prompt: 'You are Ada, a friendly guide to this conversational avatar service. Answer in one or two short sentences.',
  behaviour: { greeting: 'Hello! I am Ada. Ask me my name, or ask me for a joke.', greeting_mode: 'verbatim', farewell_message: 'Goodbye!', farewell_mode: 'verbatim' },
  starts_conversation: true,
  max_concurrency: 4,
} as const;

/**
 * The hostnames the demo agent admits: this machine as a browser on it or on its network reaches
 * it (loopback, its host name, its non-internal addresses) and the public base URL's host. Not
 * `*`: the demo agent cannot be embedded by other sites.
 */
export function demoHostnames(publicBaseUrl: string | undefined): string[] {
  const names = new Set(['localhost', '127.0.0.1', '[::1]', hostname().toLowerCase()]);
  for (const addresses of Object.values(networkInterfaces())) {
    for (const a of addresses ?? []) if (!a.internal) names.add(a.family === 'IPv6' ? `[${a.address.toLowerCase().split('%')[0]}]` : a.address);
  }
  if (publicBaseUrl) names.add(new URL(publicBaseUrl).hostname.toLowerCase());
  // Only what allowed_hostnames accepts (a host name with `_`, say, is left out).
  return [...names].filter((n) => /^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$|^\[[0-9a-f:.]+\]$/.test(n));
}

/**
 * Creates the published demo agent when the demo organization was just created (first start);
 * on later starts finds it, if the operator kept it. Returns its id, or null (no demo page agent).
 */
export async function ensureDemoAgent(server: Pick<ServiceCore, 'db' | 'services' | 'config'>, firstStart: boolean): Promise<string | null> {
  const org = await server.services.organizations.findByName(DEMO_ORGANIZATION.name);
  if (!org) return null;
  const existing = await server.db('agents').where({ organization_id: org.organization_id, title: DEMO_AGENT.title, status: 'published' }).first('agent_id');
  if (existing) return existing.agent_id as string;
  if (!firstStart) return null;
  const principal = { organizationId: org.organization_id, apiKeyId: 'bootstrap', createdBy: 'system:demo' };
  const agent = await server.services.agents.create(principal, {
    title: DEMO_AGENT.title,
    description: DEMO_AGENT.description,
    system_prompt: DEMO_AGENT.system_prompt,
    behaviour: { ...AGENT_DEFAULTS.behaviour, ...DEMO_AGENT.behaviour },
    starts_conversation: DEMO_AGENT.starts_conversation,
    max_concurrency: DEMO_AGENT.max_concurrency,
    allowed_hostnames: demoHostnames(server.config.publicBaseUrl),
  });
  await server.services.agents.setStatus(principal, agent.agent_id, 'published');
  return agent.agent_id;
}
