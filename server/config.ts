import { join } from 'node:path';
import { AddressPolicy } from '../processors/tools/address-policy.ts';

/** Object storage: the filesystem driver (embedded default) or any S3-compatible service. */
export type StorageConfig =
  | { driver: 'filesystem'; /** Root directory of stored objects; default `<dataDir>/objects`. */ root?: string }
  | {
      driver: 's3';
      bucket: string;
      region: string;
      /** Custom endpoint for S3-compatible services (MinIO, R2, ...). */
      endpoint?: string;
      forcePathStyle?: boolean;
      accessKeyId?: string;
      secretAccessKey?: string;
    };

export interface ServerConfig {
  /** TCP port; 0 picks a free one (tests). */
  port: number;
  host: string;
  /** PostgreSQL URL; when absent the embedded PGlite database in `<dataDir>/pglite` is used. */
  databaseUrl?: string;
  /** Directory for the embedded database, stored objects and generated secrets. */
  dataDir: string;
  storage: StorageConfig;
  /** Secret from which the AES-256-GCM key for provider keys is derived (sts_api_key). */
  encryptionKey: string;
  /** HMAC secret for the filesystem driver's expiring URLs. */
  signingSecret: string;
  /**
   * Private ranges (CIDRs or single addresses) that tool webhooks may reach despite the SSRF
   * policy; empty (nothing private reachable) by default. Checked when the server starts.
   */
  webhookAllowedRanges: readonly string[];
  /** External base address (`{base_url}`) used in signed URLs and the OpenAPI servers list. */
  publicBaseUrl?: string;
  /** Lifetime of pre-signed upload and download URLs. */
  signedUrlTtlMs: number;
  /** Largest JSON request body accepted. */
  maxJsonBodyBytes: number;
  /** Upload sessions not finalized within this time are aborted (parts deleted). */
  uploadSessionTtlMs: number;
  /** pino level; `silent` in tests. */
  logLevel: string;
}

export const SERVER_DEFAULTS = {
  /** Port of `npm start` when PORT is unset. */
  port: 8080,
  host: '0.0.0.0',
  dataDir: '.data',
  /** Signed URLs live one hour: long enough for a 10,000-part upload on a slow link. */
  signedUrlTtlMs: 60 * 60 * 1000,
  /** 1 MB: the largest legitimate body (an agent with many tools) is far below this. */
  maxJsonBodyBytes: 1024 * 1024,
  /** A day: generous for the largest upload on a slow link, short enough not to hoard disk. */
  uploadSessionTtlMs: 24 * 60 * 60 * 1000,
  /** How often abandoned uploads are swept. */
  uploadSweepIntervalMs: 60 * 60 * 1000,
  logLevel: 'info',
  webhookAllowedRanges: [] as readonly string[],
} as const;

/** Fills defaults; secrets must be supplied (see `loadConfigFromEnv` for the persisted embedded ones). */
export function resolveConfig(input: Partial<ServerConfig> & Pick<ServerConfig, 'encryptionKey' | 'signingSecret'>): ServerConfig {
  const dataDir = input.dataDir ?? SERVER_DEFAULTS.dataDir;
  return {
    port: input.port ?? SERVER_DEFAULTS.port,
    host: input.host ?? SERVER_DEFAULTS.host,
    databaseUrl: input.databaseUrl,
    dataDir,
    storage: input.storage ?? { driver: 'filesystem', root: join(dataDir, 'objects') },
    encryptionKey: input.encryptionKey,
    signingSecret: input.signingSecret,
    webhookAllowedRanges: checkedRanges(input.webhookAllowedRanges ?? SERVER_DEFAULTS.webhookAllowedRanges),
    publicBaseUrl: input.publicBaseUrl?.replace(/\/+$/, ''),
    signedUrlTtlMs: input.signedUrlTtlMs ?? SERVER_DEFAULTS.signedUrlTtlMs,
    maxJsonBodyBytes: input.maxJsonBodyBytes ?? SERVER_DEFAULTS.maxJsonBodyBytes,
    uploadSessionTtlMs: input.uploadSessionTtlMs ?? SERVER_DEFAULTS.uploadSessionTtlMs,
    logLevel: input.logLevel ?? SERVER_DEFAULTS.logLevel,
  };
}

/** Refuses a mistyped range at start-up rather than at the first tool call. */
function checkedRanges(ranges: readonly string[]): readonly string[] {
  new AddressPolicy(ranges);
  return [...ranges];
}
