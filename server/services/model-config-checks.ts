/**
 * Checks of a model configuration's reference image (issue #14, "fail early"). Two stages:
 *
 * - At write (POST/PUT), synchronously: the asset named by `reference_image_asset_id` exists and is
 *   visible to the caller's organization (its own or the template organization's; another
 *   organization's is treated as not existing), is an image asset, and its content decodes as a
 *   PNG, JPEG or WebP image of bounded size (sharp reads the header). Failures are 4xx errors.
 * - The face check: the face plugin's `face-landmarks` asset hook runs the landmark pass once per
 *   image asset, after upload, and stores its result with the asset. A configuration's
 *   `reference_check` is read from there, so every configuration using one asset shares one pass.
 *
 * The /realtime resolver reads the same `referenceCheckOf` so REST and sessions agree.
 * Decisions: docs/decisions-rest.md, "Model configurations".
 */
import type { Readable } from 'node:stream';
import sharp from 'sharp';
import type { Db } from '../db/connect.ts';
import { ApiError } from '../http/api-error.ts';
import { StorageError, type ObjectStorage } from '../storage/object-storage.ts';
import { imageTooLarge, isImageAsset } from './asset-hooks.ts';
import { TEMPLATE_ORGANIZATION } from './organizations.ts';

export const REFERENCE_CHECK_LIMITS = {
  /** The configuration key naming the reference image (the face variants' schema). */
  field: 'reference_image_asset_id',
  /** The asset hook whose stored result is the face check. */
  faceHook: 'face-landmarks',
  /** Bytes read from the start of the object to identify the image (its header). */
  headerBytes: 1024 * 1024,
  /** Larger images are refused at write (the face plugin refuses them at decode). */
  maxPixels: 40_000_000,
  /** Formats the face models decode. */
  formats: ['png', 'jpeg', 'webp'] as readonly string[],
} as const;

export type ReferenceCheckStatus = 'pending' | 'ok' | 'failed' | 'unchecked';
export type ReferenceCheckReason = 'reference_missing' | 'not_image' | 'no_face' | 'check_failed';

/** `reference_check` of a ModelConfig; null when the configuration names no reference image. */
export interface ReferenceCheck {
  readonly asset_id: string;
  readonly status: ReferenceCheckStatus;
  readonly reason: ReferenceCheckReason | null;
  readonly message: string | null;
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function referenceAssetIdOf(configurations: unknown): string | undefined {
  const value = (configurations as Record<string, unknown> | null | undefined)?.[REFERENCE_CHECK_LIMITS.field];
  return typeof value === 'string' ? value : undefined;
}

/** What the check needs of an asset row (`face` = `analysis->'face-landmarks'`). */
export interface ReferenceAssetRow {
  readonly asset_id: string;
  readonly organization_id: string;
  readonly category: string;
  readonly content_type: string | null;
  readonly storage_key: string;
  readonly size_bytes: number | string;
  readonly face: unknown;
}

/** Loads the reference assets of these configurations (one query), keyed by asset id. */
export async function loadReferenceAssets(db: Db, assetIds: Iterable<string>): Promise<Map<string, ReferenceAssetRow>> {
  const ids = [...new Set([...assetIds].filter((id) => UUID_RE.test(id)))];
  if (!ids.length) return new Map();
  const rows: ReferenceAssetRow[] = await db('assets')
    .whereIn('asset_id', ids)
    .select('asset_id', 'organization_id', 'category', 'content_type', 'storage_key', 'size_bytes', db.raw(`analysis->'${REFERENCE_CHECK_LIMITS.faceHook}' as face`));
  return new Map(rows.map((r) => [String(r.asset_id).toLowerCase(), r]));
}

/** The asset, if the configuration's organization may use it. */
export function visibleAsset(assets: Map<string, ReferenceAssetRow>, assetId: string, organizationId: string): ReferenceAssetRow | undefined {
  const row = assets.get(assetId.toLowerCase());
  return row && (row.organization_id === organizationId || row.organization_id === TEMPLATE_ORGANIZATION.organization_id) ? row : undefined;
}

/**
 * The reference check of one configuration from its asset's stored face analysis.
 * `faceCheckInstalled`: whether this server runs the face check at all (else `unchecked`).
 */
export function referenceCheckOf(
  configurations: unknown,
  organizationId: string,
  assets: Map<string, ReferenceAssetRow>,
  faceCheckInstalled: boolean,
): ReferenceCheck | null {
  const assetId = referenceAssetIdOf(configurations);
  if (assetId === undefined) return null;
  const asset = visibleAsset(assets, assetId, organizationId);
  const failed = (reason: ReferenceCheckReason, message: string): ReferenceCheck => ({ asset_id: assetId, status: 'failed', reason, message });
  if (!asset) return failed('reference_missing', `reference image asset ${assetId} does not exist (or was deleted)`);
  if (!isImageAsset(asset)) return failed('not_image', `asset ${assetId} is not an image asset (category ${JSON.stringify(asset.category)}, content type ${JSON.stringify(asset.content_type)})`);
  const face = asset.face as Record<string, unknown> | null | undefined;
  if (face && typeof face === 'object') {
    if (typeof face['error'] === 'string') {
      const message = face['error'];
      // The face plugin's messages (FaceModelError no_face_detected / invalid_image).
      if (/no face/i.test(message)) return failed('no_face', `no face was found in reference image ${assetId}; use a well-lit, front-facing portrait`);
      if (/decod|empty/i.test(message)) return failed('not_image', `reference image ${assetId} could not be decoded: ${message}`);
      return failed('check_failed', `the face check of reference image ${assetId} failed: ${message}`);
    }
    if (face['version'] === 1 && Array.isArray(face['points'])) return { asset_id: assetId, status: 'ok', reason: null, message: null };
  }
  if (!faceCheckInstalled) return { asset_id: assetId, status: 'unchecked', reason: null, message: 'this server has no face check installed' };
  return { asset_id: assetId, status: 'pending', reason: null, message: 'the face check of the reference image has not finished yet' };
}

async function readHead(storage: ObjectStorage, key: string, bytes: number): Promise<Buffer> {
  const stream: Readable = await storage.openObject(key);
  const chunks: Buffer[] = [];
  let total = 0;
  try {
    for await (const chunk of stream) {
      const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
      chunks.push(buf);
      total += buf.length;
      if (total >= bytes) break;
    }
  } finally {
    stream.destroy();
  }
  return Buffer.concat(chunks).subarray(0, bytes);
}

const invalidReference = (assetId: string, message: string, reason: ReferenceCheckReason) =>
  new ApiError('validation_failed', message, {
    issues: [{ location: 'body', path: `/model_configurations/${REFERENCE_CHECK_LIMITS.field}`, message, reason }],
    asset_id: assetId,
    reason,
  });

/**
 * The write-time check of `model_configurations.reference_image_asset_id` (when present):
 * 404 `asset_not_found` for a missing or another organization's asset, 400 `validation_failed`
 * (`details.reason = not_image`) when it is not an image we can animate.
 */
export async function validateReferenceAsset(db: Db, storage: ObjectStorage, organizationId: string, configurations: unknown): Promise<ReferenceAssetRow | undefined> {
  const assetId = referenceAssetIdOf(configurations);
  if (assetId === undefined) return undefined;
  const assets = await loadReferenceAssets(db, [assetId]);
  const asset = visibleAsset(assets, assetId, organizationId);
  const path = `/model_configurations/${REFERENCE_CHECK_LIMITS.field}`;
  if (!asset) {
    throw new ApiError('asset_not_found', `reference image asset ${assetId} not found (model_configurations.${REFERENCE_CHECK_LIMITS.field})`, { asset_id: assetId, path });
  }
  if (!isImageAsset(asset)) {
    throw invalidReference(assetId, `asset ${assetId} is not an image asset (category ${JSON.stringify(asset.category)}, content type ${JSON.stringify(asset.content_type)}); upload the reference image with category "image" or an image/* content type`, 'not_image');
  }
  const tooLarge = imageTooLarge(Number(asset.size_bytes));
  if (tooLarge) throw invalidReference(assetId, `reference image asset ${assetId}: ${tooLarge}`, 'not_image');
  let head: Buffer;
  try {
    head = await readHead(storage, asset.storage_key, REFERENCE_CHECK_LIMITS.headerBytes);
  } catch (err) {
    // Only a missing object is the asset's problem; the storage failing is a 503.
    if (!(err instanceof StorageError && err.code === 'object_missing')) throw err;
    throw new ApiError('asset_not_found', `the content of reference image asset ${assetId} is missing from storage`, { asset_id: assetId, path });
  }
  let format: string | undefined;
  let pixels = 0;
  try {
    const meta = await sharp(head, { limitInputPixels: false }).metadata();
    format = meta.format;
    pixels = (meta.width ?? 0) * (meta.height ?? 0);
  } catch {
    format = undefined;
  }
  if (!format || !REFERENCE_CHECK_LIMITS.formats.includes(format) || pixels <= 0) {
    const declared = asset.content_type ? ` (declared ${asset.content_type})` : '';
    throw invalidReference(assetId, `reference image asset ${assetId} is not a PNG, JPEG or WebP image${declared}: its content does not decode as one`, 'not_image');
  }
  if (pixels > REFERENCE_CHECK_LIMITS.maxPixels) {
    throw invalidReference(assetId, `reference image asset ${assetId} has ${pixels} pixels; at most ${REFERENCE_CHECK_LIMITS.maxPixels} are accepted`, 'not_image');
  }
  return asset;
}
