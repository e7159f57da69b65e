import type { StorageConfig } from '../config/server-config.ts';
import type { UrlSigner } from '../security/url-signer.ts';
import { FilesystemStorage } from './filesystem-storage.ts';
import type { ObjectStorage } from './object-storage.ts';
import { S3Storage } from './s3-storage.ts';

export * from './object-storage.ts';
export { FilesystemStorage, encodeObjectKey, decodeObjectKey } from './filesystem-storage.ts';
export { S3Storage } from './s3-storage.ts';

export function createObjectStorage(config: StorageConfig, fallbackRoot: string, signer: UrlSigner): ObjectStorage {
  if (config.driver === 's3') return new S3Storage(config);
  return new FilesystemStorage(config.root ?? fallbackRoot, signer);
}
