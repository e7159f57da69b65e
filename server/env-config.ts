import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { faceSessionLimitFromEnv } from './capacity/capacity-gate.ts';
import { resolveConfig, SERVER_DEFAULTS, type ServerConfig, type StorageConfig } from './config.ts';
import { jobSettingsFromEnv } from './jobs/job-settings.ts';

/**
 * Reads the server configuration from environment variables. Secrets not given in the
 * environment are generated once and kept in `<dataDir>/secrets.json`, so an embedded
 * install keeps decrypting its stored provider keys across restarts.
 */
export function loadConfigFromEnv(env: NodeJS.ProcessEnv = process.env): ServerConfig {
  const dataDir = env.SVC_DATA_DIR ?? SERVER_DEFAULTS.dataDir;
  const storage: StorageConfig =
    env.STORAGE_DRIVER === 's3'
      ? {
          driver: 's3',
          bucket: required(env, 'S3_BUCKET'),
          region: env.S3_REGION ?? 'us-east-1',
          endpoint: env.S3_ENDPOINT,
          forcePathStyle: env.S3_FORCE_PATH_STYLE === 'true',
          accessKeyId: env.S3_ACCESS_KEY_ID,
          secretAccessKey: env.S3_SECRET_ACCESS_KEY,
        }
      : { driver: 'filesystem', root: env.STORAGE_ROOT ?? join(dataDir, 'objects') };
  checkSttProvider(env);
  const persisted = env.SVC_ENCRYPTION_KEY && env.SVC_SIGNING_SECRET ? undefined : persistedSecrets(dataDir);
  return resolveConfig({
    port: env.PORT ? Number(env.PORT) : SERVER_DEFAULTS.port,
    host: env.HOST ?? SERVER_DEFAULTS.host,
    databaseUrl: env.DATABASE_URL || undefined,
    dataDir,
    storage,
    encryptionKey: env.SVC_ENCRYPTION_KEY ?? persisted!.encryptionKey,
    signingSecret: env.SVC_SIGNING_SECRET ?? persisted!.signingSecret,
    webhookAllowedRanges: (env.SVC_WEBHOOK_ALLOWED_RANGES ?? '').split(',').map((r) => r.trim()).filter(Boolean),
    livekitAllowedRanges: (env.SVC_LIVEKIT_ALLOWED_RANGES ?? '').split(',').map((r) => r.trim()).filter(Boolean),
    publicBaseUrl: env.PUBLIC_BASE_URL,
    trustProxy: ['1', 'true', 'yes'].includes((env.SVC_TRUST_PROXY ?? '').trim().toLowerCase()),
    maxFaceSessions: faceSessionLimitFromEnv(env),
    logLevel: env.LOG_LEVEL ?? SERVER_DEFAULTS.logLevel,
    headersTimeoutMs: milliseconds(env, 'SVC_HEADERS_TIMEOUT_MS'),
    requestTimeoutMs: milliseconds(env, 'SVC_REQUEST_TIMEOUT_MS'),
    database: {
      statementTimeoutMs: milliseconds(env, 'SVC_DB_STATEMENT_TIMEOUT_MS') ?? SERVER_DEFAULTS.database.statementTimeoutMs,
      lockTimeoutMs: milliseconds(env, 'SVC_DB_LOCK_TIMEOUT_MS') ?? SERVER_DEFAULTS.database.lockTimeoutMs,
      acquireTimeoutMs: milliseconds(env, 'SVC_DB_ACQUIRE_TIMEOUT_MS') ?? SERVER_DEFAULTS.database.acquireTimeoutMs,
      connectTimeoutMs: milliseconds(env, 'SVC_DB_CONNECT_TIMEOUT_MS') ?? SERVER_DEFAULTS.database.connectTimeoutMs,
    },
    jobs: jobSettingsFromEnv(env),
  });
}

/**
 * SVC_STT_PROVIDER: the deployment's speech-to-text provider slug (`deepgram`, `openai`, `local`,
 * ...; default: the first configured cloud key, agent/agent-pipeline.ts `sttProviderFromEnv`).
 * Whether such a plugin is installed is checked once the plugins are loaded (server/speech-providers.ts).
 */
function checkSttProvider(env: NodeJS.ProcessEnv): void {
  const slug = env.SVC_STT_PROVIDER?.trim();
  if (slug && !/^[a-z0-9][a-z0-9_-]*$/i.test(slug)) throw new Error(`SVC_STT_PROVIDER must be a provider slug (deepgram, openai, local, ...), got ${JSON.stringify(slug)}`);
}

/** A non-negative integer number of milliseconds, or undefined when unset; anything else is refused. */
function milliseconds(env: NodeJS.ProcessEnv, name: string): number | undefined {
  const text = env[name]?.trim();
  if (!text) return undefined;
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 0) throw new Error(`${name} must be a whole number of milliseconds, got ${JSON.stringify(text)}`);
  return value;
}

function required(env: NodeJS.ProcessEnv, name: string): string {
  const value = env[name];
  if (!value) throw new Error(`${name} is required when STORAGE_DRIVER=s3`);
  return value;
}

function persistedSecrets(dataDir: string): { encryptionKey: string; signingSecret: string } {
  const file = join(dataDir, 'secrets.json');
  if (existsSync(file)) return JSON.parse(readFileSync(file, 'utf8'));
  mkdirSync(dataDir, { recursive: true });
  const secrets = { encryptionKey: randomBytes(32).toString('base64'), signingSecret: randomBytes(32).toString('base64') };
  writeFileSync(file, JSON.stringify(secrets), { mode: 0o600 });
  return secrets;
}
