/**
 * The variant catalogue entries of the face models. Ids follow `<vendor>/<model>/<variant>`:
 * the model id (`svc/human-portrait`) is also the `config_id` alias of its template config,
 * and `/v1` names the first (current) renderer generation of that model.
 */
import type { FaceModelDescriptor } from '../../processors/avatar/face-model.ts';
import { faceConfigurationSchema, type FaceVariantSlug } from './configuration.ts';

export const FACE_VARIANT_IDS = {
  'human-portrait': 'svc/human-portrait/v1',
  'human-presence': 'svc/human-presence/v1',
} as const satisfies Record<FaceVariantSlug, string>;

export const FACE_MODEL_IDS = {
  'human-portrait': 'svc/human-portrait',
  'human-presence': 'svc/human-presence',
} as const satisfies Record<FaceVariantSlug, string>;

export function faceDescriptor(variant: FaceVariantSlug): FaceModelDescriptor {
  if (variant === 'human-portrait') {
    return {
      model_variant_id: FACE_VARIANT_IDS[variant],
      model_id: FACE_MODEL_IDS[variant],
      title: 'Human Portrait v1',
      description: {
        en: 'Real-time lip sync from a single reference image: 25 fps, up to 1280x720. Jaw and lips follow the speech, with natural blinks and subtle head motion.',
        summary: 'Cost-effective real-time lip sync from one portrait.',
        max_resolution: '1280x720',
        frame_rate: '25',
        input_audio: '16 kHz mono int16 PCM',
      },
      configuration_schema: faceConfigurationSchema(variant),
      status: 'public',
      tags: ['lip-sync', 'portrait', 'realtime', '720p', 'single-image'],
      preview_media_url: null,
    };
  }
  return {
    model_variant_id: FACE_VARIANT_IDS[variant],
    model_id: FACE_MODEL_IDS[variant],
    title: 'Human Presence v1',
    description: {
      en: 'The expressive presence: lip sync plus head nods and turns tied to the prosody of the speech, brow raises on stressed syllables, gaze shifts, breathing and shoulder sway.',
      summary: 'Flagship expressive real-time avatar.',
      max_resolution: '1920x1080',
      frame_rate: '25',
      input_audio: '16 kHz mono int16 PCM',
    },
    configuration_schema: faceConfigurationSchema(variant),
    status: 'public',
    tags: ['lip-sync', 'expressive', 'realtime', '1080p', 'single-image'],
    preview_media_url: null,
  };
}
