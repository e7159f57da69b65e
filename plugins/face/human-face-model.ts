/**
 * `HumanFaceModel`: the in-process FaceModel behind both face variants. The variant only
 * changes the schema (canvas limits, extra options) and the expression profile.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { VirtualClock, type Clock } from '../../core/clock.ts';
import type {
  FaceFrameSource, FaceLandmarks, FaceModel, FaceModelDescriptor, FaceReference, FaceSession, FaceSessionConfig,
} from '../../processors/avatar/face-model.ts';
import { resolveFaceOptions, validateFaceConfiguration, type FaceVariantSlug } from './configuration.ts';
import { FaceAnimator } from './face-animator.ts';
import { HumanFaceFrameSource } from './face-frame-source.ts';
import { FaceReferenceCache, sharedFaceReferenceCache } from './face-reference-cache.ts';
import { InlineFaceRaster, type FaceRaster } from './face-raster.ts';
import { buildFaceRig } from './face-rig.ts';
import { ClockedFaceSession } from './face-session.ts';
import { sharedFaceRenderPool, type FaceRenderPool } from './render-pool.ts';
import { faceDescriptor } from './variants.ts';

/** The bundled default face: a NASA public-domain astronaut portrait (credited in the README). */
export const DEFAULT_FACE_IMAGE_PATH = fileURLToPath(new URL('./assets/astronaut-512.png', import.meta.url));

export interface HumanFaceModelOptions {
  /** Image used when a session names no reference image. Default: the NASA astronaut portrait. */
  readonly defaultFaceImagePath?: string;
  /** Landmark/decoded-image cache. Default: the process-wide one. */
  readonly referenceCache?: FaceReferenceCache;
  /**
   * Render worker threads: `0` rasterises on the calling thread (as before the pool existed);
   * absent: the process-wide pool (`SVC_FACE_RENDER_THREADS`, default max(1, cores - 1));
   * n > 0: the process-wide pool of n threads.
   */
  readonly renderThreads?: number;
  /** A pool of one's own instead of the process-wide one (tests, embedding). */
  readonly renderPool?: FaceRenderPool;
}

/**
 * Sessions on a `VirtualClock` render inline: virtual time moves only when advanced and never
 * waits for another thread, so a worker's answer would land after its frame's due time.
 */
const rendersInline = (clock: Clock) => clock instanceof VirtualClock;

const unclosedSources = new FinalizationRegistry<FaceRaster>((raster) => raster.close());

export class HumanFaceModel implements FaceModel {
  readonly descriptor: FaceModelDescriptor;
  private readonly cache: FaceReferenceCache;
  private defaultImage: Uint8Array | undefined;

  constructor(readonly variant: FaceVariantSlug, readonly options: HumanFaceModelOptions = {}) {
    this.descriptor = faceDescriptor(variant);
    this.cache = options.referenceCache ?? sharedFaceReferenceCache();
  }

  validateConfiguration(configuration: unknown): Record<string, unknown> {
    return validateFaceConfiguration(this.variant, configuration);
  }

  async prepareReference(image: Uint8Array, landmarks?: FaceLandmarks): Promise<FaceReference> {
    return (await this.cache.prepare(image, landmarks)).reference;
  }

  async openSource(config: FaceSessionConfig = {}, placement: { readonly inline?: boolean } = {}): Promise<HumanFaceFrameSource> {
    const options = resolveFaceOptions(this.variant, config.configuration);
    const ref = config.referenceImage;
    const bytes = ref === undefined ? this.defaultFaceImage() : ref instanceof Uint8Array ? ref : ref.image;
    const { reference, rgb } = await this.cache.prepare(bytes, ref instanceof Uint8Array || ref === undefined ? undefined : ref.landmarks);
    const pool = placement.inline ? null : this.renderPool();
    const raster: FaceRaster = pool
      ? await pool.open(rgb, reference.landmarks, options)
      : new InlineFaceRaster(await buildFaceRig(rgb, reference.landmarks, options));
    const seed = options.seed ?? Number.parseInt(reference.landmarks.imageSha256.slice(0, 8), 16);
    const source = new HumanFaceFrameSource(raster, new FaceAnimator(options, seed));
    // A source nobody closes (benches, offline renders) frees its worker state once collected.
    if (raster.threaded) unclosedSources.register(source, raster, source);
    return source;
  }

  /** The pool this model renders on, or null to render inline. */
  renderPool(): FaceRenderPool | null {
    if (this.options.renderPool) return this.options.renderPool;
    return this.options.renderThreads === undefined ? sharedFaceRenderPool() : sharedFaceRenderPool(this.options.renderThreads);
  }

  async openSession(config: FaceSessionConfig | undefined, clock: Clock): Promise<FaceSession> {
    const source: FaceFrameSource = await this.openSource(config, { inline: rendersInline(clock) });
    const quality = resolveFaceOptions(this.variant, config?.configuration).jpegQuality;
    return new ClockedFaceSession(source, clock, config?.imageFormat ?? 'jpeg', quality);
  }

  private defaultFaceImage(): Uint8Array {
    this.defaultImage ??= new Uint8Array(readFileSync(this.options.defaultFaceImagePath ?? DEFAULT_FACE_IMAGE_PATH));
    return this.defaultImage;
  }
}
