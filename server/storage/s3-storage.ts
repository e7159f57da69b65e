import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListPartsCommand,
  PutObjectCommand,
  type Part,
  S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import type { Readable } from 'node:stream';
import {
  MULTIPART_RULES,
  StorageError,
  StorageUnavailableError,
  normaliseEtag,
  type CompletedPart,
  type ObjectStorage,
  type StoredObject,
} from './object-storage.ts';

export interface S3StorageOptions {
  bucket: string;
  region: string;
  endpoint?: string;
  forcePathStyle?: boolean;
  accessKeyId?: string;
  secretAccessKey?: string;
  /** Defaults `S3_DEFAULTS`. */
  connectTimeoutMs?: number;
  idleTimeoutMs?: number;
}

/**
 * How long S3 may take: to connect, and without a byte either way once connected (a request, its
 * answer's headers or body; the SDK's default has no limit, and a bucket that stops answering held
 * a request, and the REST call behind it, for ever). After the SDK's own retries, a failure is
 * `StorageUnavailableError` (503).
 */
export const S3_DEFAULTS = {
  connectTimeoutMs: 5_000,
  idleTimeoutMs: 30_000,
} as const;

/** An S3 error's name (`NoSuchKey`, `NotFound`, ...) and HTTP status, when S3 answered at all. */
function s3Failure(err: unknown): { name: string; status: number | undefined } {
  const e = err as { name?: unknown; Code?: unknown; $metadata?: { httpStatusCode?: unknown } } | null;
  const status = e?.$metadata?.httpStatusCode;
  return { name: typeof e?.Code === 'string' ? e.Code : typeof e?.name === 'string' ? e.name : '', status: typeof status === 'number' ? status : undefined };
}

/**
 * Whether S3 said the key does not exist: `NoSuchKey`, or a 404 (a HEAD's answer has no body to
 * name it; a HEAD on a missing bucket reads as a missing key, a limit of S3's HEAD). A 403 does
 * not: it is also what expired or wrong credentials, a skewed clock or a KMS denial get, so it is
 * the storage unavailable (503); S3 answers 403 for a missing key to credentials without
 * s3:ListBucket, which the service's credentials must have (docs/decisions-rest.md). `NoSuchBucket`
 * never does (the bucket is misconfigured, and an object must not read as deleted).
 */
function isMissing(err: unknown): boolean {
  const { name, status } = s3Failure(err);
  if (name === 'NoSuchBucket') return false;
  return name === 'NoSuchKey' || name === 'NotFound' || status === 404;
}

/** Whether S3 said the multipart upload does not exist (completed, aborted, never made). */
function isUploadGone(err: unknown): boolean {
  const { name, status } = s3Failure(err);
  return name === 'NoSuchUpload' || (status === 404 && name !== 'NoSuchBucket');
}

const unavailable = (what: string, err: unknown) => new StorageUnavailableError(`S3 ${what} failed: ${(err as Error)?.message ?? String(err)}`, { cause: err });

/** S3 (or S3-compatible) driver: browsers PUT parts straight to the bucket with pre-signed URLs. */
export class S3Storage implements ObjectStorage {
  readonly driver = 's3' as const;
  private readonly client: S3Client;
  private readonly bucket: string;

  constructor(options: S3StorageOptions) {
    this.bucket = options.bucket;
    this.client = new S3Client({
      region: options.region,
      endpoint: options.endpoint,
      forcePathStyle: options.forcePathStyle,
      credentials:
        options.accessKeyId && options.secretAccessKey
          ? { accessKeyId: options.accessKeyId, secretAccessKey: options.secretAccessKey }
          : undefined,
      // socketTimeout is an idle timeout that also covers a body being read or sent (a large object
      // may take longer than any fixed deadline); requestTimeout would end at the headers.
      requestHandler: { connectionTimeout: options.connectTimeoutMs ?? S3_DEFAULTS.connectTimeoutMs, socketTimeout: options.idleTimeoutMs ?? S3_DEFAULTS.idleTimeoutMs },
    });
  }

  /** One S3 call; a failure S3 did not explain is the storage being unavailable. */
  private async send<T>(what: string, call: () => Promise<T>, known: (err: unknown) => Error | undefined = () => undefined): Promise<T> {
    try {
      return await call();
    } catch (err) {
      throw known(err) ?? unavailable(what, err);
    }
  }

  async createMultipartUpload(key: string, contentType: string | null): Promise<string> {
    const out = await this.send('CreateMultipartUpload', () =>
      this.client.send(new CreateMultipartUploadCommand({ Bucket: this.bucket, Key: key, ContentType: contentType ?? undefined })),
    );
    return out.UploadId!;
  }

  signUploadPartUrl(key: string, uploadId: string, partNumber: number, ttlMs: number): Promise<string> {
    return getSignedUrl(
      this.client,
      new UploadPartCommand({ Bucket: this.bucket, Key: key, UploadId: uploadId, PartNumber: partNumber }),
      { expiresIn: Math.ceil(ttlMs / 1000) },
    );
  }

  async completeMultipartUpload(key: string, uploadId: string, parts: CompletedPart[]): Promise<StoredObject> {
    // Check parts first so the client gets our precise error codes instead of S3's.
    // Every page: S3 answers at most 1,000 parts a request whatever MaxParts asks, and an upload
    // may have up to 10,000.
    const stored = new Map<number, Part>();
    let marker: string | undefined;
    for (;;) {
      const page = await this.send(
        'ListParts',
        () => this.client.send(new ListPartsCommand({ Bucket: this.bucket, Key: key, UploadId: uploadId, MaxParts: 1000, ...(marker ? { PartNumberMarker: marker } : {}) })),
        (err) => (isUploadGone(err) ? new StorageError('upload_missing', `upload ${uploadId} does not exist`) : undefined),
      );
      for (const p of page.Parts ?? []) stored.set(p.PartNumber!, p);
      const next = page.NextPartNumberMarker;
      if (!page.IsTruncated || !next || next === marker || stored.size > MULTIPART_RULES.maxPartNumber) break;
      marker = next;
    }
    for (const [index, part] of parts.entries()) {
      const found = stored.get(part.part_number);
      if (!found) throw new StorageError('part_missing', `part ${part.part_number} was never uploaded`, { part_number: part.part_number });
      if (normaliseEtag(found.ETag ?? '') !== normaliseEtag(part.etag)) {
        throw new StorageError('etag_mismatch', `ETag of part ${part.part_number} does not match the stored part`, { part_number: part.part_number });
      }
      if (index < parts.length - 1 && (found.Size ?? 0) < MULTIPART_RULES.minPartBytes) {
        throw new StorageError('part_too_small', `part ${part.part_number} is smaller than ${MULTIPART_RULES.minPartBytes} bytes`, { part_number: part.part_number });
      }
    }
    await this.send(
      'CompleteMultipartUpload',
      () =>
        this.client.send(
          new CompleteMultipartUploadCommand({
            Bucket: this.bucket,
            Key: key,
            UploadId: uploadId,
            MultipartUpload: { Parts: parts.map((p) => ({ PartNumber: p.part_number, ETag: `"${normaliseEtag(p.etag)}"` })) },
          }),
        ),
      (err) => {
        // The parts were checked above; these are races with another writer of the upload.
        const { name } = s3Failure(err);
        if (name === 'NoSuchUpload') return new StorageError('upload_missing', `upload ${uploadId} does not exist`);
        if (name === 'InvalidPart' || name === 'InvalidPartOrder') return new StorageError('part_missing', `S3 refused the parts: ${(err as Error).message}`);
        if (name === 'EntityTooSmall') return new StorageError('part_too_small', `S3 refused the parts: ${(err as Error).message}`);
        return undefined;
      },
    );
    const head = await this.headObject(key);
    if (!head) throw new StorageError('object_missing', `object ${key} missing after completion`);
    return head;
  }

  async abortMultipartUpload(key: string, uploadId: string): Promise<void> {
    // An upload already gone (completed, aborted) is what was asked for; S3 failing is not.
    try {
      await this.client.send(new AbortMultipartUploadCommand({ Bucket: this.bucket, Key: key, UploadId: uploadId }));
    } catch (err) {
      if (!isUploadGone(err)) throw unavailable('AbortMultipartUpload', err);
    }
  }

  signDownloadUrl(key: string, ttlMs: number, contentType: string | null): Promise<string> {
    return getSignedUrl(
      this.client,
      new GetObjectCommand({ Bucket: this.bucket, Key: key, ResponseContentType: contentType ?? undefined }),
      { expiresIn: Math.ceil(ttlMs / 1000) },
    );
  }

  async putObject(key: string, data: Buffer, contentType: string | null): Promise<StoredObject> {
    const out = await this.send('PutObject', () =>
      this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key: key, Body: data, ContentType: contentType ?? undefined })),
    );
    return { etag: out.ETag ?? '', sizeBytes: data.length };
  }

  async getObject(key: string): Promise<Buffer> {
    const stream = await this.openObject(key);
    const chunks: Buffer[] = [];
    try {
      for await (const chunk of stream) chunks.push(chunk as Buffer);
    } catch (err) {
      throw unavailable('GetObject (reading the body)', err);
    }
    return Buffer.concat(chunks);
  }

  async openObject(key: string): Promise<Readable> {
    const out = await this.send(
      'GetObject',
      () => this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: key })),
      (err) => (isMissing(err) ? new StorageError('object_missing', `object ${key} does not exist`) : undefined),
    );
    return out.Body as Readable;
  }

  async headObject(key: string): Promise<StoredObject | null> {
    try {
      const out = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: key }));
      return { etag: out.ETag ?? '', sizeBytes: Number(out.ContentLength ?? 0) };
    } catch (err) {
      // Only a missing key is `null`: an outage must not read as a deleted object.
      if (isMissing(err)) return null;
      throw unavailable('HeadObject', err);
    }
  }

  async deleteObject(key: string): Promise<void> {
    await this.send('DeleteObject', () => this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: key })));
  }
}
