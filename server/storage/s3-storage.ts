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
}

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
    });
  }

  async createMultipartUpload(key: string, contentType: string | null): Promise<string> {
    const out = await this.client.send(
      new CreateMultipartUploadCommand({ Bucket: this.bucket, Key: key, ContentType: contentType ?? undefined }),
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
      const page = await this.client
        .send(new ListPartsCommand({ Bucket: this.bucket, Key: key, UploadId: uploadId, MaxParts: 1000, ...(marker ? { PartNumberMarker: marker } : {}) }))
        .catch(() => {
          throw new StorageError('upload_missing', `upload ${uploadId} does not exist`);
        });
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
    await this.client.send(
      new CompleteMultipartUploadCommand({
        Bucket: this.bucket,
        Key: key,
        UploadId: uploadId,
        MultipartUpload: { Parts: parts.map((p) => ({ PartNumber: p.part_number, ETag: `"${normaliseEtag(p.etag)}"` })) },
      }),
    );
    const head = await this.headObject(key);
    if (!head) throw new StorageError('object_missing', `object ${key} missing after completion`);
    return head;
  }

  async abortMultipartUpload(key: string, uploadId: string): Promise<void> {
    await this.client.send(new AbortMultipartUploadCommand({ Bucket: this.bucket, Key: key, UploadId: uploadId })).catch(() => undefined);
  }

  signDownloadUrl(key: string, ttlMs: number, contentType: string | null): Promise<string> {
    return getSignedUrl(
      this.client,
      new GetObjectCommand({ Bucket: this.bucket, Key: key, ResponseContentType: contentType ?? undefined }),
      { expiresIn: Math.ceil(ttlMs / 1000) },
    );
  }

  async putObject(key: string, data: Buffer, contentType: string | null): Promise<StoredObject> {
    const out = await this.client.send(
      new PutObjectCommand({ Bucket: this.bucket, Key: key, Body: data, ContentType: contentType ?? undefined }),
    );
    return { etag: out.ETag ?? '', sizeBytes: data.length };
  }

  async getObject(key: string): Promise<Buffer> {
    const stream = await this.openObject(key);
    const chunks: Buffer[] = [];
    for await (const chunk of stream) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks);
  }

  async openObject(key: string): Promise<Readable> {
    try {
      const out = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: key }));
      return out.Body as Readable;
    } catch {
      throw new StorageError('object_missing', `object ${key} does not exist`);
    }
  }

  async headObject(key: string): Promise<StoredObject | null> {
    try {
      const out = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: key }));
      return { etag: out.ETag ?? '', sizeBytes: Number(out.ContentLength ?? 0) };
    } catch {
      return null;
    }
  }

  async deleteObject(key: string): Promise<void> {
    await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: key }));
  }
}
