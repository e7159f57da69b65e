/**
 * `model_configurations` of the face variants: the JSON Schema published in the variant
 * catalogue (the REST server validates with it, so it must stay plain draft-07 that ajv accepts
 * in strict mode: no `format`), its defaults, and the typed options the renderer uses.
 */
import AjvModule from 'ajv';
import { FaceModelError } from '../../processors/avatar/face-model.ts';

/** Canvas limits per variant; the spec caps human-portrait at 720p. */
export const FACE_CANVAS_LIMITS = {
  'human-portrait': { maxWidth: 1280, maxHeight: 720 },
  'human-presence': { maxWidth: 1920, maxHeight: 1080 },
} as const;

export type FaceVariantSlug = keyof typeof FACE_CANVAS_LIMITS;

/** Defaults of every option, declared once. Each is documented in the schema below. */
export const FACE_CONFIGURATION_DEFAULTS = {
  width: 1280,
  height: 720,
  background: '#1d2330',
  fit: 'contain',
  framing: 'head-and-shoulders',
  motion_scale: 1,
  mouth_scale: 1,
  blink_rate_per_minute: 16,
  jpeg_quality: 80,
  expressiveness: 1,
  breathing_scale: 1,
  expression_strength: 0.3,
} as const;

const UUID_PATTERN = '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$';

/** Builds the `configuration_schema` of one variant. */
export function faceConfigurationSchema(variant: FaceVariantSlug): Record<string, unknown> {
  const limits = FACE_CANVAS_LIMITS[variant];
  const d = FACE_CONFIGURATION_DEFAULTS;
  const properties: Record<string, unknown> = {
    reference_image_asset_id: {
      type: 'string',
      pattern: UUID_PATTERN,
      description: 'Image asset (PNG or JPEG, one clearly visible face) to animate. Absent: the default face.',
    },
    width: {
      type: 'integer', minimum: 128, maximum: limits.maxWidth, multipleOf: 2, default: d.width,
      description: `Output width in pixels (even, at most ${limits.maxWidth}).`,
    },
    height: {
      type: 'integer', minimum: 128, maximum: limits.maxHeight, multipleOf: 2, default: d.height,
      description: `Output height in pixels (even, at most ${limits.maxHeight}).`,
    },
    background: {
      type: 'string', pattern: '^#[0-9a-fA-F]{6}$', default: d.background,
      description: 'Canvas colour around the portrait, #rrggbb.',
    },
    fit: {
      type: 'string', enum: ['contain', 'cover'], default: d.fit,
      description: 'contain: the whole image on the canvas, edges feathered into the background; cover: the image fills the canvas (cropped).',
    },
    framing: {
      type: 'string', enum: ['head-and-shoulders', 'full'], default: d.framing,
      description: 'head-and-shoulders: crop the reference around the detected face; full: the whole image.',
    },
    motion_scale: {
      type: 'number', minimum: 0, maximum: 2, default: d.motion_scale,
      description: 'Scale of head motion (idle sway, speech nods). 0 keeps the head still; breathing and blinks continue.',
    },
    mouth_scale: {
      type: 'number', minimum: 0.2, maximum: 2, default: d.mouth_scale,
      description: 'Scale of jaw and lip movement while speaking.',
    },
    blink_rate_per_minute: {
      type: 'number', minimum: 0, maximum: 60, default: d.blink_rate_per_minute,
      description: 'Average number of blinks per minute.',
    },
    expression_strength: {
      type: 'number', minimum: 0, maximum: 1, default: d.expression_strength,
      description: 'Share of the reference photo\'s expression (a smile) kept while speaking: the mouth relaxes toward neutral to talk and returns to the photo\'s expression in pauses and at rest. 0: a neutral mouth while speaking; 1: the photo\'s expression held throughout. A neutral photo is unaffected.',
    },
    jpeg_quality: {
      type: 'integer', minimum: 30, maximum: 95, default: d.jpeg_quality,
      description: 'JPEG quality of streamed frames.',
    },
    seed: {
      type: 'integer', minimum: 0, maximum: 2147483647,
      description: 'Seed of the idle motion and blink timing. Absent: derived from the image, so a face always moves the same way.',
    },
    preview: {
      description: 'Written by the server when an idle video generation job for this configuration completes.',
    },
  };
  if (variant === 'human-presence') {
    properties.expressiveness = {
      type: 'number', minimum: 0, maximum: 2, default: d.expressiveness,
      description: 'Scale of prosody-driven expression: nods and turns on stressed syllables, brow raises, gaze shifts.',
    };
    properties.breathing_scale = {
      type: 'number', minimum: 0, maximum: 2, default: d.breathing_scale,
      description: 'Scale of breathing and shoulder sway.',
    };
  }
  return {
    $schema: 'http://json-schema.org/draft-07/schema#',
    title: `${variant} model_configurations`,
    type: 'object',
    additionalProperties: false,
    properties,
  };
}

/** Resolved, typed options of one session (camelCase, defaults applied). */
export interface FaceOptions {
  readonly variant: FaceVariantSlug;
  readonly referenceImageAssetId: string | null;
  readonly width: number;
  readonly height: number;
  /** RGB 0..255. */
  readonly background: readonly [number, number, number];
  readonly fit: 'contain' | 'cover';
  readonly framing: 'head-and-shoulders' | 'full';
  readonly motionScale: number;
  readonly mouthScale: number;
  readonly blinkRatePerMinute: number;
  readonly jpegQuality: number;
  readonly seed: number | null;
  readonly expressiveness: number;
  readonly breathingScale: number;
  /** Share of the reference's expression kept while speaking (0 neutral .. 1 as the photo). */
  readonly expressionStrength: number;
}

const Ajv = (AjvModule as unknown as { default: typeof AjvModule }).default ?? AjvModule;
type ValidateFn = ((data: unknown) => boolean) & { errors?: Array<{ instancePath: string; message?: string; params?: unknown }> | null };
const validators = new Map<FaceVariantSlug, ValidateFn>();

function validatorFor(variant: FaceVariantSlug): ValidateFn {
  let v = validators.get(variant);
  if (!v) {
    const ajv = new (Ajv as any)({ allErrors: true, useDefaults: true, strict: true });
    v = ajv.compile(faceConfigurationSchema(variant)) as ValidateFn;
    validators.set(variant, v);
  }
  return v;
}

/** Validates `model_configurations` and returns a copy with defaults filled in. */
export function validateFaceConfiguration(variant: FaceVariantSlug, configuration: unknown): Record<string, unknown> {
  if (configuration === undefined || configuration === null) configuration = {};
  if (typeof configuration !== 'object' || Array.isArray(configuration)) {
    throw new FaceModelError('invalid_configuration', `${variant}: model_configurations must be an object`, {
      errors: [{ path: '', message: 'must be object' }],
    });
  }
  const copy = structuredClone(configuration) as Record<string, unknown>;
  const validate = validatorFor(variant);
  if (!validate(copy)) {
    const errors = (validate.errors ?? []).map((e) => ({ path: e.instancePath || '/', message: e.message ?? 'invalid', params: e.params }));
    const summary = errors.map((e) => `${e.path} ${e.message}${describeParams(e.params)}`).join('; ');
    throw new FaceModelError('invalid_configuration', `${variant}: invalid model_configurations: ${summary}`, { errors });
  }
  return copy;
}

function describeParams(params: unknown): string {
  if (!params || typeof params !== 'object') return '';
  const p = params as Record<string, unknown>;
  if (typeof p.additionalProperty === 'string') return ` (${p.additionalProperty})`;
  if (Array.isArray(p.allowedValues)) return ` (${p.allowedValues.join(', ')})`;
  return '';
}

function parseColour(hex: string): [number, number, number] {
  const n = Number.parseInt(hex.slice(1), 16);
  return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
}

/** Validated configuration -> typed options. */
export function resolveFaceOptions(variant: FaceVariantSlug, configuration: unknown): FaceOptions {
  const c = validateFaceConfiguration(variant, configuration) as Record<string, any>;
  const d = FACE_CONFIGURATION_DEFAULTS;
  return {
    variant,
    referenceImageAssetId: c.reference_image_asset_id ?? null,
    width: c.width,
    height: c.height,
    background: parseColour(c.background),
    fit: c.fit,
    framing: c.framing,
    motionScale: c.motion_scale,
    mouthScale: c.mouth_scale,
    blinkRatePerMinute: c.blink_rate_per_minute,
    jpegQuality: c.jpeg_quality,
    seed: c.seed ?? null,
    expressiveness: c.expressiveness ?? (variant === 'human-presence' ? d.expressiveness : 0),
    breathingScale: c.breathing_scale ?? (variant === 'human-presence' ? d.breathing_scale : 0.5),
    expressionStrength: c.expression_strength,
  };
}
