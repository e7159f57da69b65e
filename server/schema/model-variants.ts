import { dateTime, responseShape } from './common.ts';
import type { JsonSchema } from '../http/api-routes.ts';

export const modelVariantSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    model_variant_id: { type: 'string', description: '`<vendor>/<model>/<variant>`' },
    model_id: { type: 'string' },
    title: { type: 'string' },
    description: { type: 'object', additionalProperties: { type: 'string' } },
    preview_media_url: { type: ['string', 'null'] },
    configuration_schema: { type: 'object' },
    tags: { type: 'array', items: { type: 'string' } },
    status: { type: 'string', enum: ['public', 'available', 'deprecated'] },
    created_at: dateTime,
    updated_at: dateTime,
  },
});

/** Public catalogue metadata (decision: the variant fields a player needs, no schema). */
export const publicModelVariantSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    model_variant_id: { type: 'string' },
    model_id: { type: 'string' },
    title: { type: 'string' },
    description: { type: 'object' },
    preview_media_url: { type: ['string', 'null'] },
    tags: { type: 'array', items: { type: 'string' } },
    frame_rate: { type: ['integer', 'null'], description: 'Frames per second of the rendered video.' },
    max_frame_size: {
      type: ['object', 'null'],
      properties: { width: { type: 'integer' }, height: { type: 'integer' } },
      description: 'Largest rendered frame size.',
    },
  },
});

/** Variant ids travel in the path with their slashes (`/model-variants/svc/human-portrait/v1`). */
export const variantIdPattern = '^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+){2}$';
