import type Router from '@koa/router';
import type { ApiRoutes } from '../../http/api-routes.ts';
import { errors, listOf, listQuery, pathId, uuid } from '../schema/common.ts';
import { createModelConfigBody, modelConfigSchema, replaceModelConfigBody } from '../schema/model-configs.ts';
import type { Services } from '../../services/index.ts';

export function mountModelConfigRoutes(api: ApiRoutes, router: Router, { modelConfigs }: Services): void {
  const tag = 'Model configurations';
  api.add(router, {
    method: 'get', path: '/model-configs', operationId: 'listModelConfigs', tag, auth: 'api_key',
    summary: 'List model configurations of the organization (or the shared templates)',
    query: listQuery({
      model_variant_id: { type: 'string', maxLength: 128, description: 'Only configurations of this variant.' },
      model_variant_tag: { type: 'string', maxLength: 128, description: 'Configs whose variant has this tag.' },
      source: { type: 'string', enum: ['org', 'template'], default: 'org', description: "`org` (default): your organization's configurations; `template`: the shared templates." },
    }),
    responses: { 200: { description: 'Page of model configurations', schema: listOf(modelConfigSchema) }, ...errors(400, 401) },
  }, async ({ principal, query }) => ({ status: 200, body: await modelConfigs.list(principal, query, query) }));

  api.add(router, {
    method: 'post', path: '/model-configs', operationId: 'createModelConfig', tag, auth: 'api_key',
    summary: 'Create a model configuration',
    description: "Read the variant's `configuration_schema` first: `model_configurations` is validated against it. " +
      'A `reference_image_asset_id` is checked at once: 404 `asset_not_found` when the asset does not exist or belongs to another organization, ' +
      '400 `validation_failed` (`details.reason = not_image`) when its content is not a PNG, JPEG or WebP image. ' +
      'The face check runs once per image asset after upload; its result is `reference_check` (`pending`, then `ok` or `failed`).',
    body: createModelConfigBody,
    responses: { 201: { description: 'Created', schema: modelConfigSchema }, ...errors(400, 401, 404, 409) },
  }, async ({ principal, body }) => ({ status: 201, body: await modelConfigs.create(principal, body) }));

  api.add(router, {
    method: 'get', path: '/model-configs/:model_config_id', operationId: 'getModelConfig', tag, auth: 'api_key',
    summary: 'Get a model configuration (own or template)', params: pathId('model_config_id'),
    responses: { 200: { description: 'The model configuration', schema: modelConfigSchema }, ...errors(400, 401, 404) },
  }, async ({ principal, params }) => ({ status: 200, body: await modelConfigs.get(principal, params.model_config_id) }));

  api.add(router, {
    method: 'put', path: '/model-configs/:model_config_id', operationId: 'replaceModelConfig', tag, auth: 'api_key',
    summary: 'Replace title and model_configurations', params: pathId('model_config_id'), body: replaceModelConfigBody,
    description: 'The reference image is checked as on creation.',
    responses: { 200: { description: 'Updated', schema: modelConfigSchema }, ...errors(400, 401, 403, 404, 409) },
  }, async ({ principal, params, body }) => ({ status: 200, body: await modelConfigs.replace(principal, params.model_config_id, body) }));

  api.add(router, {
    method: 'delete', path: '/model-configs/:model_config_id', operationId: 'deleteModelConfig', tag, auth: 'api_key',
    summary: 'Delete a model configuration',
    description: '409 while an agent references it (as face_id), unless `referenced_by` names that agent: its reference is removed.',
    params: pathId('model_config_id'),
    query: { type: 'object', additionalProperties: false, properties: { referenced_by: { ...uuid, description: 'An agent using this configuration as `face_id`: its reference is cleared and the configuration deleted.' } } },
    responses: { 204: { description: 'Deleted' }, ...errors(400, 401, 403, 404, 409) },
  }, async ({ principal, params, query }) => {
    await modelConfigs.delete(principal, params.model_config_id, query.referenced_by);
    return { status: 204 };
  });
}
