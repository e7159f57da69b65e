/**
 * The face plugin: registers the in-process face models `face:human-portrait` and
 * `face:human-presence`. `registry.list('face')` yields their catalogue descriptors (the REST
 * server seeds its variant catalogue from them); `registry.create('face', slug, options)`
 * returns a `FaceModel`.
 */
import type { Plugin, Registry } from '../../core/registry.ts';
import type { FaceModel } from '../../processors/avatar/face-model.ts';
import { HumanFaceModel, type HumanFaceModelOptions } from './human-face-model.ts';
import { faceDescriptor } from './variants.ts';
import { sharedFaceReferenceCache } from './face-reference-cache.ts';
import type { FaceVariantSlug } from './configuration.ts';

const SLUGS: readonly FaceVariantSlug[] = ['human-portrait', 'human-presence'];

export const facePlugin: Plugin = {
  name: 'face',
  register(registry: Registry) {
    // Landmarks of every uploaded image, once, stored with the asset (analysis['face-landmarks'])
    // so face sessions never run detection again for it. No face found is stored as an error.
    registry.register('asset-hook', 'face-landmarks', () => ({
      async onImageAssetFinalized(asset: { read(): Promise<Buffer> }) {
        const bytes = await asset.read();
        const prepared = await sharedFaceReferenceCache().prepare(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength));
        return { ...prepared.reference.landmarks };
      },
    }));
    for (const slug of SLUGS) {
      const descriptor = faceDescriptor(slug);
      registry.register<FaceModel, HumanFaceModelOptions>(
        'face',
        slug,
        (options) => new HumanFaceModel(slug, options),
        { label: descriptor.title, descriptor: { ...descriptor } },
      );
    }
  },
};

export { HumanFaceModel, type HumanFaceModelOptions } from './human-face-model.ts';
export { FACE_VARIANT_IDS, FACE_MODEL_IDS, faceDescriptor } from './variants.ts';
export {
  FACE_CONFIGURATION_DEFAULTS, FACE_CANVAS_LIMITS, faceConfigurationSchema, validateFaceConfiguration,
  resolveFaceOptions, type FaceOptions, type FaceVariantSlug,
} from './configuration.ts';
export { HumanFaceFrameSource } from './face-frame-source.ts';
export { ClockedFaceSession, encodeJpeg } from './face-session.ts';
export { FaceReferenceCache, sharedFaceReferenceCache } from './face-reference-cache.ts';
export { FaceApiLandmarkDetector, type LandmarkDetector, type RgbImage } from './landmark-detector.ts';
export { LANDMARK_WORKER_DEFAULTS, WorkerLandmarkDetector } from './landmark-worker.ts';
export { FaceRenderer } from './face-renderer.ts';
export { InlineFaceRaster, type FaceGeometry, type FaceRaster, type RasterResult } from './face-raster.ts';
export {
  FaceRenderPool, FaceRenderError, WorkerFaceRaster, RENDER_POOL_DEFAULTS, configuredRenderThreads, defaultRenderThreads,
  sharedFaceRenderPool, shutdownFaceRenderPools, type FaceRenderPoolOptions,
} from './render-pool.ts';
export { DEFAULT_FACE_IMAGE_PATH } from './human-face-model.ts';
export { visemeFor, visemesOf, visemeSegments, type Viseme, type VisemeSegment } from './visemes.ts';
