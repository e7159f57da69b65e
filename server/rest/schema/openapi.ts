import type { JsonSchema, RouteSpec } from '../../http/api-routes.ts';
import { errorResponse } from './common.ts';

/** Published version of the REST description (spec "Versioning"). */
export const API_VERSION = 'v1.0.0';

/**
 * Descriptions of parameters whose route schema has none (shared names across routes: pagination,
 * ids in paths, the signed-URL query of the storage routes). A route's own description wins.
 */
const PARAMETER_GLOSSARY: Record<string, string> = {
  limit: 'Items per page, 1 to 100 (default 20).',
  offset: 'Items to skip (default 0).',
  model_config_id: 'Id of the model configuration.',
  agent_id: 'Id of the agent.',
  asset_id: 'Id of the asset.',
  job_id: 'Id of the generation job.',
  model_variant_id: 'Id of the model variant, `<vendor>/<model>/<variant>` (slashes as they are or encoded).',
  model_id: 'Only variants of this model (`svc/human-portrait`).',
  status: 'Only variants with this status (API keys see `public` ones only).',
  source: '`org` (default): your organization\'s; `template`: the shared templates every organization can read.',
  category: 'Only assets of this category (`image`, `video`, ...).',
  generator: 'Slug of an installed idle-video generator (`idle-v1`).',
  upload_id: 'Id of the multipart upload session.',
  part_number: 'Part number, 1 to 10000.',
  object: 'Object key, base64url-encoded (from a signed URL).',
  expires: 'Expiry of the signed URL (epoch milliseconds); part of the signature.',
  signature: 'HMAC-SHA256 signature of the URL, issued by the API.',
  content_type: 'Content type the download is served with; part of the signature.',
};

/** Builds the OpenAPI 3.1 document from the same route specs the server validates with. */
export function buildOpenApiDocument(specs: readonly RouteSpec[], baseUrl: string): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const spec of specs) {
    const path = spec.path.replace(/:([A-Za-z_]+)/g, '{$1}');
    const pathParams = [...spec.path.matchAll(/:([A-Za-z_]+)/g)].map((m) => m[1]!);
    const paramProps = (spec.params?.properties ?? {}) as Record<string, JsonSchema>;
    const queryProps = (spec.query?.properties ?? {}) as Record<string, JsonSchema>;
    const queryRequired = new Set((spec.query?.required as string[] | undefined) ?? []);
    const parameters = [
      ...pathParams.map((name) => {
        const schema = paramProps[name] ?? { type: 'string' };
        const description = (schema.description as string | undefined) ?? PARAMETER_GLOSSARY[name];
        return { name, in: 'path', required: true, schema, ...(description ? { description } : {}) };
      }),
      ...Object.entries(queryProps).map(([name, schema]) => {
        const description = (schema.description as string | undefined) ?? PARAMETER_GLOSSARY[name];
        return { name, in: 'query', required: queryRequired.has(name), schema, ...(description ? { description } : {}) };
      }),
    ];
    const responses = Object.fromEntries(
      Object.entries(spec.responses).map(([status, r]) => [
        status,
        { description: r.description, ...(r.schema ? { content: { [r.contentType ?? 'application/json']: { schema: r.schema } } } : r.contentType ? { content: { [r.contentType]: {} } } : {}) },
      ]),
    );
    (paths[path] ??= {})[spec.method] = {
      operationId: spec.operationId,
      summary: spec.summary,
      ...(spec.description ? { description: spec.description } : {}),
      tags: [spec.tag],
      security: spec.auth === 'api_key' ? [{ ApiKey: [] }] : [],
      ...(parameters.length ? { parameters } : {}),
      ...(spec.body ? { requestBody: { required: true, content: { 'application/json': { schema: spec.body } } } } : {}),
      ...(spec.rawBody ? { requestBody: { required: true, content: { 'application/octet-stream': {} } } } : {}),
      responses,
    };
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Conversational Avatar Service REST API',
      version: API_VERSION,
      description: 'Model configurations, the model variant catalogue, assets, agents and their tools, call history. Errors are `{ code, message, details? }`. Responses carry `Cache-Control: private, no-store` unless stated.',
    },
    servers: [{ url: `${baseUrl}/v1` }],
    components: {
      securitySchemes: { ApiKey: { type: 'apiKey', in: 'header', name: 'X-API-Key' } },
      schemas: { ErrorResponse: errorResponse },
    },
    paths,
  };
}
