import type Router from '@koa/router';
import type { ApiRoutes } from '../../http/api-routes.ts';
import { publicAgentSchema } from '../schema/agents.ts';
import { publicAssetSchema } from '../schema/assets.ts';
import { errors, pathId } from '../schema/common.ts';
import { publicModelConfigSchema } from '../schema/model-configs.ts';
import { publicModelVariantSchema } from '../schema/model-variants.ts';
import type { Services } from '../../services/index.ts';
import { publicAgent } from '../../services/public-agent.ts';
import { variantIdFrom } from './model-variants.ts';

/** Catalogue entries change only on deploy: browsers and CDNs may keep them five minutes. */
const CATALOGUE_CACHE = 'public, max-age=300';

/** Unauthenticated reads for browser clients (permissive CORS is set for /v1/public/*). */
export function mountPublicRoutes(api: ApiRoutes, router: Router, { modelConfigs, modelVariants, assets, agents }: Services): void {
  const tag = 'Public';
  api.add(router, {
    method: 'get', path: '/public/model-configs/:model_config_id', operationId: 'getPublicModelConfig', tag, auth: 'public',
    summary: 'Public view of a model configuration', params: pathId('model_config_id'),
    responses: { 200: { description: 'Public model configuration', schema: publicModelConfigSchema }, ...errors(400, 404) },
  }, async ({ params }) => ({ status: 200, body: await modelConfigs.getPublic(params.model_config_id) }));

  api.add(router, {
    method: 'get', path: '/public/assets/:asset_id', operationId: 'getPublicAsset', tag, auth: 'public',
    summary: 'Public view of an asset with a signed asset_url', params: pathId('asset_id'),
    responses: { 200: { description: 'Public asset', schema: publicAssetSchema }, ...errors(400, 404) },
  }, async ({ params, baseUrl }) => ({ status: 200, body: await assets.getPublic(params.asset_id, baseUrl) }));

  api.add(router, {
    method: 'get', path: '/public/model-variants/:model_variant_id', aliasPaths: ['/public/model-variants/:vendor/:model/:variant'],
    operationId: 'getPublicModelVariant', tag, auth: 'public', summary: 'Catalogue metadata of a public variant (frame rate, largest frame size)',
    responses: { 200: { description: 'Variant metadata', schema: publicModelVariantSchema }, ...errors(400, 404) },
  }, async ({ params }) => ({
    status: 200,
    body: await modelVariants.getPublic(variantIdFrom(params)),
    headers: { 'Cache-Control': CATALOGUE_CACHE },
  }));

  api.add(router, {
    method: 'get', path: '/public/agents/:agent_id', operationId: 'getPublicAgent', tag, auth: 'public',
    summary: 'Public agent record read by the widget', description: 'Published agents only (unpublished: 403 agent_unpublished). A bare asset UUID in preview_url is resolved to a signed URL.',
    params: pathId('agent_id'),
    responses: { 200: { description: 'Public agent', schema: publicAgentSchema }, ...errors(400, 403, 404) },
  }, async ({ params, baseUrl }) => ({ status: 200, body: await publicAgent(agents, assets, params.agent_id, baseUrl) }));
}
