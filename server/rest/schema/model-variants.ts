import { dateTime, described, responseShape } from './common.ts';
import type { JsonSchema } from '../../http/api-routes.ts';

export const modelVariantSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    model_variant_id: { type: 'string', description: 'Id of the variant, `<vendor>/<model>/<variant>` (`svc/human-portrait/v1`); model configurations name it.' },
    model_id: { type: 'string', description: 'Parent model (`svc/human-portrait`); also a `/realtime` `config_id` alias for its template configuration.' },
    title: { type: 'string', description: 'Display title, unique per model.' },
    description: { type: 'object', additionalProperties: { type: 'string' }, description: 'UI texts, string to string (`en`: the description; `frame_rate`, `max_resolution` when the model declares them).' },
    preview_media_url: { type: ['string', 'null'], description: 'URL of a preview image or video of the variant, or null.' },
    configuration_schema: { type: 'object', description: 'JSON Schema of `model_configurations` for this variant: read it before creating a model configuration.' },
    tags: { type: 'array', items: { type: 'string' }, description: 'Free tags (`portrait`, `realtime`, ...); filter with `tags` / `model_variant_tag`.' },
    status: { type: 'string', enum: ['public', 'available', 'deprecated'], description: 'Catalogue status; API keys see only `public` variants.' },
    created_at: described(dateTime, 'When the variant entered the catalogue.'),
    updated_at: described(dateTime, 'Last change of the catalogue entry.'),
  },
});

/** Public catalogue metadata (decision: the variant fields a player needs, no schema). */
export const publicModelVariantSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    model_variant_id: { type: 'string', description: 'Id of the variant, `<vendor>/<model>/<variant>`.' },
    model_id: { type: 'string', description: 'Parent model.' },
    title: { type: 'string', description: 'Display title.' },
    description: { type: 'object', description: 'UI texts, string to string.' },
    preview_media_url: { type: ['string', 'null'], description: 'URL of a preview image or video, or null.' },
    tags: { type: 'array', items: { type: 'string' }, description: 'Free tags of the variant.' },
    frame_rate: { type: ['integer', 'null'], description: 'Frames per second of the rendered video.' },
    max_frame_size: {
      type: ['object', 'null'],
      properties: { width: { type: 'integer', description: 'Pixels.' }, height: { type: 'integer', description: 'Pixels.' } },
      description: 'Largest rendered frame size.',
    },
  },
});

/** Variant ids travel in the path with their slashes (`/model-variants/svc/human-portrait/v1`). */
export const variantIdPattern = '^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+){2}$';
