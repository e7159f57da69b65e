import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { resolveConfig, SERVER_DEFAULTS, type ServerConfig, type StorageConfig } from './config.ts';

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
    publicBaseUrl: env.PUBLIC_BASE_URL,
    logLevel: env.LOG_LEVEL ?? SERVER_DEFAULTS.logLevel,
  });
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
