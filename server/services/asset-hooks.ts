import type { Registry } from '../../core/registry.ts';

/**
 * Plugins that derive data from uploaded assets register under this kind, e.g. the face
 * plugin computing landmarks once per image: `registry.register('asset-hook', 'face-landmarks',
 * () => hook)`. The server never imports plugin internals; it calls each registered hook.
 */
export const ASSET_HOOK_KIND = 'asset-hook';

export interface FinalizedAsset {
  asset_id: string;
  organization_id: string;
  name: string;
  category: string;
  content_type: string | null;
  size_bytes: number;
  /** Reads the stored bytes. */
  read(): Promise<Buffer>;
}

export interface AssetHook {
  /**
   * Called once after an image asset is finalized (category `image` or an `image/*` type).
   * The returned JSON value is stored in `assets.analysis[<hook slug>]`; a throw is logged and
   * stored as `{ error }` without affecting the upload.
   */
  onImageAssetFinalized?(asset: FinalizedAsset): Promise<Record<string, unknown> | void>;
}

export function assetHooks(registry: Registry): Array<{ slug: string; hook: AssetHook }> {
  return registry.slugs(ASSET_HOOK_KIND).map((slug) => ({ slug, hook: registry.create<AssetHook>(ASSET_HOOK_KIND, slug) }));
}

export const isImageAsset = (asset: { category: string; content_type: string | null }) =>
  asset.category === 'image' || (asset.content_type ?? '').startsWith('image/');

/**
 * Image assets are read whole into memory (the face check, a reference image for a session, an
 * idle-video source), and an asset may be up to 5 GiB: only images up to `maxReadBytes` are read.
 * A larger one is refused where it is used (a reference image: 400 `not_image`; a generation
 * source: 400 `validation_failed`), and its face check records why. The largest reference image
 * accepted (`REFERENCE_CHECK_LIMITS.maxPixels`) is far smaller than this in any format.
 */
export const IMAGE_ASSET_LIMITS = {
  maxReadBytes: 64 * 1024 * 1024,
} as const;

/** Why an image asset of `sizeBytes` is not read; undefined when it may be. */
export function imageTooLarge(sizeBytes: number, maxReadBytes: number = IMAGE_ASSET_LIMITS.maxReadBytes): string | undefined {
  return sizeBytes > maxReadBytes ? `the image is ${sizeBytes} bytes; images of at most ${maxReadBytes} bytes are read` : undefined;
}
