import { dateTime, uuid, responseShape } from './common.ts';
import type { JsonSchema } from '../http/api-routes.ts';
import { MULTIPART_RULES } from '../storage/object-storage.ts';

const TOKEN = `[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}`;
const MIME_TYPE_PATTERN = `^${TOKEN}/${TOKEN}([ \\t]*;[ \\t]*[A-Za-z0-9!#$&^_.+-]+=([A-Za-z0-9!#$&^_.+-]+|"[^"\\\\\\x00-\\x1f\\x7f]*"))*$`;
/** `ASSET_LIMITS.contentTypePattern` as a RegExp (the storage routes re-check stored values). */
export const MIME_TYPE_RE = new RegExp(MIME_TYPE_PATTERN);

export const ASSET_LIMITS = {
  /** Decision: file names up to 255 characters (common filesystem limit). */
  nameMaxLength: 255,
  /** Decision: category is a lowercase word of up to 64 characters (`image`, `video`, `weight`, ...). */
  categoryPattern: '^[a-z][a-z0-9_-]{0,63}$',
  contentTypeMaxLength: 255,
  /**
   * A MIME type (RFC 6838 names: `type/subtype`, optional `; name=value` parameters), anchored at
   * both ends: no CR, LF or other control character can reach a response header.
   */
  contentTypePattern: MIME_TYPE_PATTERN,
  /** Decision: 5 GiB per asset (single-object limit of the S3 PUT family). */
  maxSizeBytes: 5 * 1024 * 1024 * 1024,
  generateVariantIdMaxLength: 128,
} as const;

const name = { type: 'string', minLength: 1, maxLength: ASSET_LIMITS.nameMaxLength };
const category = { type: 'string', pattern: ASSET_LIMITS.categoryPattern };
const contentType = { type: ['string', 'null'], maxLength: ASSET_LIMITS.contentTypeMaxLength, pattern: ASSET_LIMITS.contentTypePattern };
const partNumber = { type: 'integer', minimum: 1, maximum: MULTIPART_RULES.maxPartNumber };

export const assetSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    asset_id: uuid,
    organization_id: { type: 'string' },
    created_by: { type: 'string' },
    name: { type: 'string' },
    category: { type: 'string' },
    content_type: { type: ['string', 'null'] },
    size_bytes: { type: 'integer', format: 'int64' },
    etag: { type: 'string' },
    created_at: dateTime,
    updated_at: dateTime,
    asset_url: { type: 'string', format: 'uri', description: 'Pre-signed download URL; expires.' },
  },
});

export const publicAssetSchema: JsonSchema = responseShape({
  type: 'object',
  properties: Object.fromEntries(
    Object.entries(assetSchema.properties as Record<string, JsonSchema>).filter(([k]) => k !== 'organization_id' && k !== 'created_by'),
  ),
});

export const initiateUploadBody: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['name', 'category'],
  properties: {
    name,
    category,
    content_type: contentType,
    size_bytes: { type: ['integer', 'null'], minimum: 0, maximum: ASSET_LIMITS.maxSizeBytes },
  },
};

export const uploadSessionSchema: JsonSchema = {
  type: 'object',
  required: ['asset_id', 'upload_id'],
  properties: { asset_id: uuid, upload_id: { type: 'string' }, s3_key: { type: 'string' } },
};

export const signPartBody: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['asset_id', 'upload_id', 'part_number'],
  properties: { asset_id: uuid, upload_id: { type: 'string', minLength: 1, maxLength: 1024 }, part_number: partNumber, s3_key: { type: 'string', maxLength: 1024 } },
};

export const signPartResponse: JsonSchema = {
  type: 'object',
  properties: { upload_url: { type: 'string', format: 'uri' }, part_number: { type: 'integer' } },
};

export const finalizeUploadBody: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['asset_id', 'upload_id', 'name', 'category', 'content_type', 'size_bytes', 'parts'],
  properties: {
    asset_id: uuid,
    upload_id: { type: 'string', minLength: 1, maxLength: 1024 },
    name,
    category,
    content_type: contentType,
    size_bytes: { type: 'integer', minimum: 0, maximum: ASSET_LIMITS.maxSizeBytes },
    s3_key: { type: 'string', maxLength: 1024 },
    parts: {
      type: 'array',
      minItems: 1,
      maxItems: MULTIPART_RULES.maxPartNumber,
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['part_number', 'etag'],
        properties: { part_number: partNumber, etag: { type: 'string', minLength: 1, maxLength: 256 } },
      },
    },
  },
};

export const generateBody: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['source_asset_id'],
  properties: {
    source_asset_id: uuid,
    reference_template: { type: 'string', enum: ['v1', 'v2', 'v3'] },
    model_variant_id: { type: 'string', maxLength: ASSET_LIMITS.generateVariantIdMaxLength },
    target_model_config_id: uuid,
  },
};

/** Decision: job status values `queued` -> `running` -> `succeeded` | `failed`. */
export const JOB_STATUSES = ['queued', 'running', 'succeeded', 'failed'] as const;

export const generationJobSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    job_id: uuid,
    generator: { type: 'string' },
    status: { type: 'string', enum: JOB_STATUSES },
    source_asset_id: uuid,
    reference_template: { type: ['string', 'null'] },
    model_variant_id: { type: ['string', 'null'] },
    target_model_config_id: { type: ['string', 'null'] },
    result: { type: ['object', 'null'], properties: { asset_id: uuid } },
    error: { type: ['string', 'null'] },
    created_at: dateTime,
    updated_at: dateTime,
  },
});
