import { dateTime, uuid, responseShape } from './common.ts';
import type { JsonSchema } from '../../http/api-routes.ts';

const d = (schema: JsonSchema, description: string): JsonSchema => ({ ...schema, description });

const FIELDS = {
  model_config_id: d(uuid, 'Id of this model configuration (server-generated). Agents reference it as `face_id`; `/realtime` takes it as `config_id`.'),
  organization_id: { type: 'string', description: 'Owning organization.' },
  model_id: { type: 'string', description: 'Parent model, derived from the variant (`svc/human-portrait`).' },
  model_variant_id: { type: 'string', description: 'The model variant being configured (`svc/human-portrait/v1`).' },
  created_by: { type: 'string', description: 'Creator: a user id, or `api_key:<id>` when created with an API key.' },
  title: { type: 'string', description: 'Display title, unique per organization.' },
  model_configurations: {
    type: 'object',
    description: "Variant-specific settings, validated against the variant's `configuration_schema` (for the face variants: `reference_image_asset_id`, `width`, `height`, ...).",
  },
  created_at: d(dateTime, 'Creation time.'),
  updated_at: d(dateTime, 'Last modification time.'),
} satisfies Record<string, JsonSchema>;

/** Decision (issue #14): the reference image's check, readable on the configuration (docs/decisions-rest.md). */
export const REFERENCE_CHECK_STATUSES = ['pending', 'ok', 'failed', 'unchecked'] as const;
export const REFERENCE_CHECK_REASONS = ['reference_missing', 'not_image', 'no_face', 'check_failed'] as const;

const referenceCheck: JsonSchema = {
  type: ['object', 'null'],
  description:
    'Check of the reference image named by `model_configurations.reference_image_asset_id`; null when the configuration names none (the default face). ' +
    'The asset and its format are checked when the configuration is written; the face check (one landmark pass per image asset, run after upload) may finish later.',
  properties: {
    asset_id: { type: 'string', description: 'The reference image asset checked.' },
    status: {
      type: 'string',
      enum: REFERENCE_CHECK_STATUSES,
      description: '`pending`: the face check has not finished; `ok`: a face was found; `failed`: see `reason` (`/realtime` refuses this configuration); `unchecked`: this server has no face check installed.',
    },
    reason: {
      type: ['string', 'null'],
      enum: [...REFERENCE_CHECK_REASONS, null],
      description: 'Why the check failed: `reference_missing` (the asset was deleted), `not_image` (the content is not a decodable image), `no_face` (no face found), `check_failed` (another failure, see `message`); null unless `failed`.',
    },
    message: { type: ['string', 'null'], description: 'Human-readable detail of the status; null when `ok`.' },
  },
};

export const modelConfigSchema: JsonSchema = responseShape({
  type: 'object',
  properties: { ...FIELDS, reference_check: referenceCheck },
});

export const publicModelConfigSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    model_config_id: FIELDS.model_config_id,
    model_variant_id: FIELDS.model_variant_id,
    title: FIELDS.title,
    model_configurations: FIELDS.model_configurations,
    created_at: FIELDS.created_at,
    updated_at: FIELDS.updated_at,
  },
});

export const MODEL_CONFIG_LIMITS = {
  /** Not in the spec; bounded so titles stay displayable and indexable. */
  titleMaxLength: 255,
  variantIdMaxLength: 128,
} as const;

const title = { type: 'string', minLength: 1, maxLength: MODEL_CONFIG_LIMITS.titleMaxLength, description: 'Display title, unique per organization (409 `title_conflict` otherwise).' };
const configurations = (extra: string): JsonSchema => ({
  type: 'object',
  description: "Variant-specific settings; read the variant's `configuration_schema` first: they are validated against it. " +
    'A `reference_image_asset_id` must name an image asset of your organization (or a template one) whose content decodes as PNG, JPEG or WebP (404 `asset_not_found`, 400 `validation_failed` otherwise).' + extra,
});

export const createModelConfigBody: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['title', 'model_variant_id'],
  properties: {
    title,
    model_variant_id: { type: 'string', minLength: 1, maxLength: MODEL_CONFIG_LIMITS.variantIdMaxLength, description: 'The public model variant to configure (404 `model_variant_not_found` otherwise).' },
    model_configurations: { ...configurations(' Default `{}`.'), default: {} },
  },
};

export const replaceModelConfigBody: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['title', 'model_configurations'],
  properties: { title, model_configurations: configurations('') },
};
