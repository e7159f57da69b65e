import type { JsonSchema } from '../http/api-routes.ts';
import { paginationQueryProperties } from '../http/pagination.ts';

export const uuid = { type: 'string', format: 'uuid' } as const;
export const dateTime = { type: 'string', format: 'date-time' } as const;
export const nullable = (schema: JsonSchema): JsonSchema => ({ ...schema, type: [schema.type as string, 'null'] });

export const errorResponse: JsonSchema = {
  type: 'object',
  required: ['code', 'message'],
  properties: {
    code: { type: 'string', description: 'Stable machine-readable code (docs/decisions-rest.md).' },
    message: { type: 'string' },
    details: { type: ['object', 'null'] },
  },
};

export const paginationSchema: JsonSchema = {
  type: 'object',
  required: ['limit', 'offset', 'total_items'],
  properties: { limit: { type: 'integer' }, offset: { type: 'integer' }, total_items: { type: 'integer' } },
};

export const listOf = (item: JsonSchema): JsonSchema => ({
  type: 'object',
  required: ['data', 'pagination'],
  properties: { data: { type: 'array', items: item }, pagination: paginationSchema },
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
  properties: { [name]: uuid },
});

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
