/**
 * The REST API (`/v1`): model configurations, the variant catalogue, assets and uploads, agents
 * with their tools and call history, the public reads, signed storage URLs (filesystem driver),
 * and the OpenAPI document and reference page built from the same route specs.
 */
import type { HttpHost } from '../http/http-app.ts';
import type { ServiceCore } from '../services/open-services.ts';
import { FilesystemStorage } from '../storage/index.ts';
import { mountAgentRoutes } from './routes/agents.ts';
import { mountAssetRoutes } from './routes/assets.ts';
import { mountDocsRoutes } from './routes/docs.ts';
import { mountModelConfigRoutes } from './routes/model-configs.ts';
import { mountModelVariantRoutes } from './routes/model-variants.ts';
import { mountPublicRoutes } from './routes/public.ts';
import { mountStorageRoutes } from './routes/storage.ts';

export function mountRestRoutes({ api, router }: Pick<HttpHost, 'api' | 'router'>, { services, registry, storage }: Pick<ServiceCore, 'services' | 'registry' | 'storage'>): void {
  mountDocsRoutes(api, router);
  mountModelConfigRoutes(api, router, services);
  mountModelVariantRoutes(api, router, services);
  mountAssetRoutes(api, router, services);
  mountAgentRoutes(api, router, services, registry);
  mountPublicRoutes(api, router, services);
  if (storage instanceof FilesystemStorage) mountStorageRoutes(api, router, storage);
}
