import type Router from '@koa/router';
import type { RouteInput } from '../../http/api-routes.ts';
import type { ApiRoutes } from '../../http/api-routes.ts';
import { ApiError } from '../../http/api-error.ts';
import { errors, listOf, listQuery } from '../schema/common.ts';
import { modelVariantSchema, variantIdPattern } from '../schema/model-variants.ts';
import type { Services } from '../../services/index.ts';

/** Variant ids contain slashes: accepted percent-encoded as one segment or as three segments. */
export function variantIdFrom(params: Record<string, string>): string {
  const id = params.model_variant_id ?? [params.vendor, params.model, params.variant].join('/');
  if (!new RegExp(variantIdPattern).test(id) || id.length > 128) {
    throw new ApiError('validation_failed', `"${id}" is not a model variant id (<vendor>/<model>/<variant>)`, { issues: [{ location: 'path', path: '/model_variant_id', message: 'must be <vendor>/<model>/<variant>' }] });
  }
  return id;
}

export const variantPathParams = {
  type: 'object',
  properties: { model_variant_id: { type: 'string', pattern: variantIdPattern, description: 'Percent-encode the slashes, or send them as path segments.' } },
};

export function mountModelVariantRoutes(api: ApiRoutes, router: Router, { modelVariants }: Services): void {
  const tag = 'Model variants';
  api.add(router, {
    method: 'get', path: '/model-variants', operationId: 'listModelVariants', tag, auth: 'api_key',
    summary: 'List the model variant catalogue', description: 'API-key callers only see variants whose status is `public`; `status` is ignored for them.',
    query: listQuery({
      model_id: { type: 'string', maxLength: 128 },
      status: { type: 'string', maxLength: 32 },
      tags: { type: 'string', maxLength: 1024, description: 'Comma-separated; every tag must match.' },
    }),
    responses: { 200: { description: 'Page of variants', schema: listOf(modelVariantSchema) }, ...errors(400, 401) },
  }, async ({ query }) => ({ status: 200, body: await modelVariants.list(query, query, true) }));

  api.add(router, {
    method: 'get', path: '/model-variants/:model_variant_id', aliasPaths: ['/model-variants/:vendor/:model/:variant'],
    operationId: 'getModelVariant', tag, auth: 'api_key', summary: 'Get one model variant (404 unless public)',
    responses: { 200: { description: 'The variant', schema: modelVariantSchema }, ...errors(400, 401, 404) },
  }, async ({ params }: RouteInput) => ({ status: 200, body: await modelVariants.get(variantIdFrom(params), true) }));
}
