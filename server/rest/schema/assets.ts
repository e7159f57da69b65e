import { dateTime, described, nullable, uuid, responseShape } from './common.ts';
import type { JsonSchema } from '../../http/api-routes.ts';
import { MULTIPART_RULES } from '../../storage/object-storage.ts';

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

const name = { type: 'string', minLength: 1, maxLength: ASSET_LIMITS.nameMaxLength, description: 'Original file name (1 to 255 characters).' };
const category = { type: 'string', pattern: ASSET_LIMITS.categoryPattern, description: 'Kind of asset, a lowercase word (`image`, `video`, `weight`, ...). Image assets (`image`, or an `image/*` content type) get the face check after upload.' };
const contentType = { type: ['string', 'null'], maxLength: ASSET_LIMITS.contentTypeMaxLength, pattern: ASSET_LIMITS.contentTypePattern, description: 'MIME type of the content (`image/png`), or null; served back on download.' };
const partNumber = { type: 'integer', minimum: 1, maximum: MULTIPART_RULES.maxPartNumber, description: 'Part number, 1 to 10000, in upload order.' };

export const assetSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    asset_id: described(uuid, 'Id of the asset, generated at upload initiation.'),
    organization_id: { type: 'string', description: 'Owning organization.' },
    created_by: { type: 'string', description: 'Uploader: a user id, or `api_key:<id>`.' },
    name: { type: 'string', description: 'Original file name.' },
    category: { type: 'string', description: 'Kind of asset (`image`, `video`, `weight`, ...).' },
    content_type: { type: ['string', 'null'], description: 'MIME type, or null.' },
    size_bytes: { type: 'integer', format: 'int64', description: 'Size of the stored object in bytes.' },
    etag: { type: 'string', description: 'ETag of the stored object, for integrity checks (multipart form `"<md5>-<parts>"`).' },
    created_at: described(dateTime, 'Finalization time.'),
    updated_at: described(dateTime, 'Last modification time.'),
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
    size_bytes: { type: ['integer', 'null'], minimum: 0, maximum: ASSET_LIMITS.maxSizeBytes, description: 'Expected total size in bytes (up to 5 GiB), or null; when given, finalize must match it.' },
  },
};

export const uploadSessionSchema: JsonSchema = {
  type: 'object',
  required: ['asset_id', 'upload_id'],
  properties: {
    asset_id: described(uuid, 'Id the asset will have; pass it to sign-part and finalize.'),
    upload_id: { type: 'string', description: 'Id of the multipart upload session; pass it to sign-part and finalize.' },
    s3_key: { type: 'string', description: 'Object key of the asset (`<organization_id>/<asset_id>`).' },
  },
};

export const signPartBody: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['asset_id', 'upload_id', 'part_number'],
  properties: {
    asset_id: described(uuid, 'From initiate-upload.'),
    upload_id: { type: 'string', minLength: 1, maxLength: 1024, description: 'From initiate-upload.' },
    part_number: partNumber,
    s3_key: { type: 'string', maxLength: 1024, description: 'Optional; when given it must be the one initiate-upload returned.' },
  },
};

export const signPartResponse: JsonSchema = {
  type: 'object',
  properties: {
    upload_url: { type: 'string', format: 'uri', description: 'Pre-signed URL: PUT the part\'s bytes there (1 h); keep the `ETag` response header for finalize.' },
    part_number: { type: 'integer', description: 'The part this URL uploads.' },
  },
};

export const finalizeUploadBody: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['asset_id', 'upload_id', 'name', 'category', 'content_type', 'size_bytes', 'parts'],
  properties: {
    asset_id: described(uuid, 'From initiate-upload.'),
    upload_id: { type: 'string', minLength: 1, maxLength: 1024, description: 'From initiate-upload.' },
    name,
    category,
    content_type: contentType,
    size_bytes: { type: 'integer', minimum: 0, maximum: ASSET_LIMITS.maxSizeBytes, description: 'Total size in bytes; must equal the sum of the parts.' },
    s3_key: { type: 'string', maxLength: 1024, description: 'Optional; when given it must be the one initiate-upload returned.' },
    parts: {
      description: 'Every uploaded part, numbered 1..N in order; every part but the last at least 5 MiB.',
      type: 'array',
      minItems: 1,
      maxItems: MULTIPART_RULES.maxPartNumber,
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['part_number', 'etag'],
        properties: { part_number: partNumber, etag: { type: 'string', minLength: 1, maxLength: 256, description: 'The `ETag` header the part PUT answered (quotes optional).' } },
      },
    },
  },
};

export const generateBody: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['source_asset_id'],
  properties: {
    source_asset_id: described(uuid, 'The image asset (yours or a template) to animate.'),
    reference_template: { type: 'string', enum: ['v1', 'v2', 'v3'], description: 'Idle head motion: `v1` calm, `v2` default, `v3` lively.' },
    model_variant_id: { type: 'string', maxLength: ASSET_LIMITS.generateVariantIdMaxLength, description: 'Face model variant that renders the idle loop (default: human-portrait).' },
    target_model_config_id: described(uuid, 'A model configuration of yours whose `model_configurations.preview` is set to the generated video on success.'),
  },
};

/** Decision: job status values `queued` -> `running` -> `succeeded` | `failed`. */
export const JOB_STATUSES = ['queued', 'running', 'succeeded', 'failed'] as const;

export const generationJobSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    job_id: described(uuid, 'Id of the job.'),
    generator: { type: 'string', description: 'Slug of the generator running it (`idle-v1`).' },
    status: { type: 'string', enum: JOB_STATUSES, description: '`queued` -> `running` -> `succeeded` or `failed`.' },
    source_asset_id: described(uuid, 'The image asset animated.'),
    reference_template: { type: ['string', 'null'], description: 'Idle motion template asked for, or null.' },
    model_variant_id: { type: ['string', 'null'], description: 'Variant asked for, or null (default).' },
    target_model_config_id: { type: ['string', 'null'], description: 'Model configuration updated on success, or null.' },
    result: { type: ['object', 'null'], properties: { asset_id: described(uuid, 'The generated `video` asset.') }, description: 'Set when `succeeded`, else null.' },
    error: { type: ['string', 'null'], description: 'Why the job failed (when `failed`), else null.' },
    // Our additions (docs/jobs.md): attempts so far (the running one included), the job's limit,
    // when a queued job is next due, and the reason the latest failed attempt gave.
    attempts: { type: 'integer', minimum: 0, description: 'Attempts so far, the running one included.' },
    max_attempts: { type: 'integer', minimum: 1, description: 'Attempts allowed before the job fails.' },
    next_attempt_at: { ...nullable(dateTime), description: 'When a queued job is next due, or null.' },
    last_error: { type: ['string', 'null'], description: 'Reason the latest failed attempt gave, or null.' },
    created_at: described(dateTime, 'Creation time.'),
    updated_at: described(dateTime, 'Last change of the job.'),
  },
});
