import { dateTime, uuid, responseShape } from './common.ts';
import type { JsonSchema } from '../http/api-routes.ts';

export const modelConfigSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    model_config_id: uuid,
    organization_id: { type: 'string' },
    model_id: { type: 'string' },
    model_variant_id: { type: 'string' },
    created_by: { type: 'string' },
    title: { type: 'string' },
    model_configurations: { type: 'object' },
    created_at: dateTime,
    updated_at: dateTime,
  },
});

export const publicModelConfigSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    model_config_id: uuid,
    model_variant_id: { type: 'string' },
    title: { type: 'string' },
    model_configurations: { type: 'object' },
    created_at: dateTime,
    updated_at: dateTime,
  },
});

export const MODEL_CONFIG_LIMITS = {
  /** Not in the spec; bounded so titles stay displayable and indexable. */
  titleMaxLength: 255,
  variantIdMaxLength: 128,
} as const;

const title = { type: 'string', minLength: 1, maxLength: MODEL_CONFIG_LIMITS.titleMaxLength };

export const createModelConfigBody: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['title', 'model_variant_id'],
  properties: {
    title,
    model_variant_id: { type: 'string', minLength: 1, maxLength: MODEL_CONFIG_LIMITS.variantIdMaxLength },
    model_configurations: { type: 'object', default: {} },
  },
};

export const replaceModelConfigBody: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['title', 'model_configurations'],
  properties: { title, model_configurations: { type: 'object' } },
};
