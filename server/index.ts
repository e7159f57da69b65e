/** Public surface of the REST server (see docs/api.md). */
export { buildServer, createServer, type AppServer, type CreateServerOptions, type ServerInput, type ServerParts } from './build-server.ts';
export { resolveConfig, SERVER_DEFAULTS, type ServerConfig, type ServerConfigInput, type StorageConfig } from './config/server-config.ts';
export { ALL_IN_ONE, REST_ONLY, type Surfaces } from './config/surfaces.ts';
export { ConfigError, loadConfigFromEnv } from './config/env.ts';
export { loadDefaultPlugins, DEFAULT_PLUGINS } from './default-plugins.ts';
export { ApiError, ERROR_STATUS, type ErrorCode } from './http/api-error.ts';
export { ApiRoutes, type RouteSpec, type RouteHandler, type RouteInput, type RouteResult, type JsonSchema } from './http/api-routes.ts';
export type { Principal } from './http/principal.ts';
export { envelope, PAGINATION, type ListEnvelope, type Page } from './http/pagination.ts';
export { closeDatabase, countOf, openDatabase, type Db } from './db/connect.ts';
export { migrateToLatest } from './db/migrate.ts';
export { SecretBox } from './security/secret-box.ts';
export * from './services/index.ts';
export { TEMPLATE_FACE_ASSET } from './services/catalogue-seed.ts';
export { AGENT_LIMITS, AGENT_LANGUAGES, BEHAVIOUR_MODES } from './rest/schema/agents.ts';
export { API_VERSION } from './rest/schema/openapi.ts';
export type { ObjectStorage, StoredObject } from './storage/object-storage.ts';
