import type { Agents } from './agents.ts';
import type { AgentCalls } from './agent-calls.ts';
import type { ApiKeys } from './api-keys.ts';
import type { Assets } from './assets.ts';
import type { GenerationJobs } from './generation-jobs.ts';
import type { ModelConfigs } from './model-configs.ts';
import type { ModelVariants } from './model-variants.ts';
import type { Organizations } from './organizations.ts';

/** The application services routes call into; built once by `createServer`. */
export interface Services {
  organizations: Organizations;
  apiKeys: ApiKeys;
  modelVariants: ModelVariants;
  modelConfigs: ModelConfigs;
  assets: Assets;
  agents: Agents;
  agentCalls: AgentCalls;
  generationJobs: GenerationJobs;
}

export { TEMPLATE_ORGANIZATION } from './organizations.ts';
export { AGENT_DEFAULTS } from './agent-defaults.ts';
export { CALL_STATUSES, TERMINATION_REASONS } from './agent-calls.ts';
export { ASSET_HOOK_KIND, type AssetHook, type FinalizedAsset } from './asset-hooks.ts';
export { IDLE_VIDEO_GENERATOR_KIND, type IdleVideoGenerator, type IdleVideoRequest } from './generation-jobs.ts';
export { STS_KIND, type StsProviderDescriptor, type StsVerifyInput, type StsVerifyResult } from './sts-providers.ts';
