import type { JsonSchema } from '../../http/api-routes.ts';
import { paginationQueryProperties } from '../../http/pagination.ts';

export const uuid = { type: 'string', format: 'uuid' } as const;
export const dateTime = { type: 'string', format: 'date-time' } as const;
export const nullable = (schema: JsonSchema): JsonSchema => ({ ...schema, type: [schema.type as string, 'null'] });
/** The schema with a description (every field of the published document has one; test/server/api-reference.test.ts). */
export const described = (schema: JsonSchema, description: string): JsonSchema => ({ ...schema, description });

export const errorResponse: JsonSchema = {
  type: 'object',
  required: ['code', 'message'],
  properties: {
    code: { type: 'string', description: 'Stable machine-readable code (docs/decisions-rest.md).' },
    message: { type: 'string', description: 'Human-readable explanation, naming the field or resource at fault.' },
    details: { type: ['object', 'null'], description: 'Structured context, by code: `issues[]` (`{location, path, message}`) for `validation_failed`, the id for the `*_not_found` codes, `reason` for conflicts.' },
  },
};

export const paginationSchema: JsonSchema = {
  type: 'object',
  required: ['limit', 'offset', 'total_items'],
  properties: {
    limit: { type: 'integer', description: 'The page size asked for (1 to 100, default 20).' },
    offset: { type: 'integer', description: 'Items skipped before this page.' },
    total_items: { type: 'integer', description: 'Items matching the request, over all pages.' },
  },
};

export const listOf = (item: JsonSchema): JsonSchema => ({
  type: 'object',
  required: ['data', 'pagination'],
  properties: {
    data: { type: 'array', items: item, description: 'The items of this page.' },
    pagination: { ...paginationSchema, description: 'Position of this page.' },
  },
});

/** Query schema with limit/offset plus extra filters. */
export const listQuery = (extra: Record<string, JsonSchema> = {}): JsonSchema => ({
  type: 'object',
  additionalProperties: false,
  properties: { ...paginationQueryProperties, ...extra },
});

export const pathId = (name: string): JsonSchema => ({
  type: 'object',
  required: [name],
  properties: { [name]: { ...uuid, description: PATH_ID_DESCRIPTIONS[name] ?? `Id of the ${name.replace(/_id$/, '').replace(/_/g, ' ')}.` } },
});

const PATH_ID_DESCRIPTIONS: Record<string, string> = {
  model_config_id: 'Id of the model configuration (your organization\'s, or a template for reads).',
  agent_id: 'Id of the agent.',
  asset_id: 'Id of the asset.',
  job_id: 'Id of the generation job.',
};

/** Standard error responses a route can return, for the OpenAPI document. */
export const errors = (...statuses: number[]) =>
  Object.fromEntries(statuses.map((s) => [s, { description: ERROR_DESCRIPTIONS[s] ?? 'error', schema: errorResponse }]));

const ERROR_DESCRIPTIONS: Record<number, string> = {
  400: 'Invalid request payload or parameters',
  401: 'Authentication missing or invalid',
  403: 'Not permitted',
  404: 'Not found',
  409: 'Conflict',
  413: 'Request body too large',
  429: 'Too many requests (`rate_limited`, retry after `Retry-After` seconds), or, on a generate request, too many jobs waiting (`too_many_jobs`)',
  502: 'An upstream server (e.g. the LiveKit server of the request) refused or could not be reached',
  503: 'No capacity now (`server_busy`): retry after `Retry-After` seconds',
};

/**
 * Response schemas list every field the server sends: each object with `properties` gets them
 * all `required` and no others allowed, so the published document states the exact shape
 * (and tests validate real responses against it).
 */
export function responseShape(schema: JsonSchema): JsonSchema {
  const out: JsonSchema = { ...schema };
  if (out.properties && typeof out.properties === 'object') {
    const props = Object.fromEntries(Object.entries(out.properties as Record<string, JsonSchema>).map(([k, v]) => [k, responseShape(v)]));
    out.properties = props;
    out.required = Object.keys(props);
    out.additionalProperties = false;
  }
  if (out.items && typeof out.items === 'object') out.items = responseShape(out.items as JsonSchema);
  return out;
}
