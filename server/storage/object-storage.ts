import { createHash } from 'node:crypto';
import type { Readable } from 'node:stream';

/** One uploaded part as the client reports it on finalize. */
export interface CompletedPart {
  part_number: number;
  etag: string;
}

export interface StoredObject {
  etag: string;
  sizeBytes: number;
}

export type StorageErrorCode = 'part_missing' | 'etag_mismatch' | 'part_too_small' | 'part_too_large' | 'upload_missing' | 'object_missing' | 'size_mismatch';

export class StorageError extends Error {
  constructor(
    readonly code: StorageErrorCode,
    message: string,
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'StorageError';
  }
}

/**
 * The object storage could not be reached or failed (a network error, a timeout, S3's 5xx, a
 * disk error): not the request's fault, nothing about the object is known. The REST API answers
 * 503 `service_unavailable` with `Retry-After`, as for a database outage.
 */
export class StorageUnavailableError extends Error {
  readonly code = 'storage_unavailable';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'StorageUnavailableError';
  }
}

export const MULTIPART_RULES = {
  /** S3's rule, kept by every driver: every part but the last is at least 5 MiB. */
  minPartBytes: 5 * 1024 * 1024,
  maxPartNumber: 10_000,
  /** S3's largest part. */
  maxPartBytes: 5 * 1024 * 1024 * 1024,
} as const;

/**
 * Object storage with S3 multipart semantics. Drivers: `FilesystemStorage` (embedded default,
 * URLs served and verified by this server) and `S3Storage`.
 */
export interface ObjectStorage {
  readonly driver: 'filesystem' | 's3';
  createMultipartUpload(key: string, contentType: string | null): Promise<string>;
  /**
   * `baseUrl` is `{base_url}` as the caller reaches this service: drivers whose URLs point at the
   * service itself (filesystem) build on it; others (S3) ignore it.
   */
  signUploadPartUrl(key: string, uploadId: string, partNumber: number, ttlMs: number, baseUrl: string): Promise<string>;
  /**
   * Assembles the parts, checking ETags and part sizes; the result is the stored object's ETag and
   * size. With `expectedSizeBytes`, a driver that can check the size before the object is
   * published (filesystem) throws `size_mismatch` and keeps the parts, so the client can retry;
   * others (S3) publish and the caller checks. Callers must hold the upload's finalize claim:
   * drivers do not arbitrate concurrent completions of one upload.
   */
  completeMultipartUpload(key: string, uploadId: string, parts: CompletedPart[], expectedSizeBytes?: number): Promise<StoredObject>;
  abortMultipartUpload(key: string, uploadId: string): Promise<void>;
  signDownloadUrl(key: string, ttlMs: number, contentType: string | null, baseUrl: string): Promise<string>;
  putObject(key: string, data: Buffer, contentType: string | null): Promise<StoredObject>;
  getObject(key: string): Promise<Buffer>;
  /** Streams an object (used by plugins that process large assets). */
  openObject(key: string): Promise<Readable>;
  headObject(key: string): Promise<StoredObject | null>;
  deleteObject(key: string): Promise<void>;
}

/**
 * The ETag S3 gives an object assembled from `parts` (and the filesystem driver too), unquoted:
 * the MD5 of the parts' binary MD5s, then `-<number of parts>`. Undefined when a part's ETag is not
 * an MD5 (S3 with SSE-KMS, say).
 */
export function multipartEtag(parts: readonly CompletedPart[]): string | undefined {
  const digests = parts.map((p) => normaliseEtag(p.etag));
  if (!digests.every((d) => /^[0-9a-f]{32}$/i.test(d))) return undefined;
  return `${createHash('md5').update(Buffer.concat(digests.map((d) => Buffer.from(d, 'hex')))).digest('hex')}-${parts.length}`;
}

/** ETags are compared without the surrounding quotes S3 (and browsers) may or may not keep. */
export function normaliseEtag(etag: string): string {
  return etag.trim().replace(/^W\//, '').replace(/^"|"$/g, '');
}
