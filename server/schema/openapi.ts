import type { JsonSchema, RouteSpec } from '../http/api-routes.ts';
import { errorResponse } from './common.ts';

/** Published version of the REST description (spec "Versioning"). */
export const API_VERSION = 'v1.0.0';

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
      ...pathParams.map((name) => ({ name, in: 'path', required: true, schema: paramProps[name] ?? { type: 'string' } })),
      ...Object.entries(queryProps).map(([name, schema]) => ({
        name, in: 'query', required: queryRequired.has(name), schema, ...(schema.description ? { description: schema.description } : {}),
      })),
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
