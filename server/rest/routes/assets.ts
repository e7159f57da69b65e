import type Router from '@koa/router';
import type { ApiRoutes } from '../../http/api-routes.ts';
import {
  assetSchema, finalizeUploadBody, generateBody, generationJobSchema, initiateUploadBody, signPartBody, signPartResponse, uploadSessionSchema,
} from '../schema/assets.ts';
import { errors, listOf, listQuery, pathId } from '../schema/common.ts';
import type { Services } from '../../services/index.ts';

export function mountAssetRoutes(api: ApiRoutes, router: Router, { assets, generationJobs }: Services): void {
  const tag = 'Assets';
  api.add(router, {
    method: 'post', path: '/assets/initiate-upload', operationId: 'initiateAssetUpload', tag, auth: 'api_key',
    summary: 'Open a multipart upload session', body: initiateUploadBody,
    responses: { 200: { description: 'Upload session', schema: uploadSessionSchema }, ...errors(400, 401) },
  }, async ({ principal, body }) => ({ status: 200, body: await assets.initiateUpload(principal, body) }));

  api.add(router, {
    method: 'post', path: '/assets/sign-part', operationId: 'signAssetUploadPart', tag, auth: 'api_key',
    summary: 'Pre-signed URL to PUT one part to (parts 1 to 10000; every part but the last at least 5 MiB)', body: signPartBody,
    responses: { 200: { description: 'Upload URL; the PUT response carries the part ETag', schema: signPartResponse }, ...errors(400, 401, 404) },
  }, async ({ principal, body, baseUrl }) => ({ status: 200, body: await assets.signPart(principal, body, baseUrl) }));

  api.add(router, {
    method: 'post', path: '/assets', operationId: 'finalizeAssetUpload', tag, auth: 'api_key',
    summary: 'Finalize an upload with every part and its ETag', body: finalizeUploadBody,
    responses: { 201: { description: 'The new asset', schema: assetSchema }, ...errors(400, 401, 404, 409) },
  }, async ({ principal, body, baseUrl }) => ({ status: 201, body: await assets.finalize(principal, body, baseUrl) }));

  api.add(router, {
    method: 'get', path: '/assets', operationId: 'listAssets', tag, auth: 'api_key',
    summary: 'List assets of the organization (or the shared templates)',
    query: listQuery({
      source: { type: 'string', enum: ['org', 'template'], default: 'org' },
      category: { type: 'string', maxLength: 64 },
      name: { type: 'string', maxLength: 255, description: 'Case-insensitive substring of the file name.' },
    }),
    responses: { 200: { description: 'Page of assets', schema: listOf(assetSchema) }, ...errors(400, 401) },
  }, async ({ principal, query, baseUrl }) => ({ status: 200, body: await assets.list(principal, query, query, baseUrl) }));

  api.add(router, {
    method: 'get', path: '/assets/generate/jobs/:job_id', operationId: 'getGenerationJob', tag, auth: 'api_key',
    summary: 'Status of an idle video generation job', params: pathId('job_id'),
    responses: { 200: { description: 'The job', schema: generationJobSchema }, ...errors(400, 401, 404) },
  }, async ({ principal, params }) => ({ status: 200, body: await generationJobs.get(principal, params.job_id) }));

  api.add(router, {
    method: 'post', path: '/assets/generate/:generator', operationId: 'generateIdleVideo', tag, auth: 'api_key',
    summary: 'Start an idle video generation job from an image asset',
    params: { type: 'object', required: ['generator'], properties: { generator: { type: 'string', pattern: '^[a-z0-9][a-z0-9._-]{0,63}$' } } },
    body: generateBody,
    responses: { 202: { description: 'Job accepted', schema: { type: 'object', properties: { job_id: { type: 'string', format: 'uuid', description: 'Id of the job: poll `GET /assets/generate/jobs/{job_id}`.' } } } }, ...errors(400, 401, 404, 429) },
  }, async ({ principal, params, body }) => ({ status: 202, body: await generationJobs.create(principal, params.generator, body) }));

  for (const [path, operationId, summary] of [
    ['/assets/:asset_id', 'getAsset', 'Get an asset (own or template) with a fresh signed asset_url'],
    ['/assets/:asset_id/download', 'getAssetDownload', 'Get an asset with a fresh signed download URL'],
  ] as const) {
    api.add(router, {
      method: 'get', path, operationId, tag, auth: 'api_key', summary, params: pathId('asset_id'),
      responses: { 200: { description: 'The asset', schema: assetSchema }, ...errors(400, 401, 404) },
    }, async ({ principal, params, baseUrl }) => ({ status: 200, body: await assets.get(principal, params.asset_id, baseUrl) }));
  }

  api.add(router, {
    method: 'delete', path: '/assets/:asset_id', operationId: 'deleteAsset', tag, auth: 'api_key',
    summary: 'Hard delete an asset and its stored object (never template assets)', params: pathId('asset_id'),
    responses: { 204: { description: 'Deleted' }, ...errors(400, 401, 403, 404) },
  }, async ({ principal, params }) => {
    await assets.delete(principal, params.asset_id);
    return { status: 204 };
  });
}
