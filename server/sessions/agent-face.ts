/**
 * Opens the face of an agent's session: the agent's `face_id` (a model configuration of its
 * organization) or, when it has none, the default `svc/human-portrait` template. The reference
 * image and its stored landmarks come from the same resolver /realtime uses, so a session never
 * runs face detection again.
 *
 * Decision (docs/sessions.md): a session's canvas is the configuration's `width`/`height` when it
 * sets them, else 640x360 (each viewer costs one VP8 encode on the server: 640x360 is what this
 * class of machine holds several of at 25 fps); `advanced.max_video_source_dimension` caps the
 * larger side. Pictures are RGB (no JPEG encode and decode on the way to WebRTC).
 */
import type { Clock } from '../../core/clock.ts';
import type { Registry } from '../../core/registry.ts';
import type { FaceModel, FaceReference, FaceSession } from '../../processors/avatar/face-model.ts';
import type { Db } from '../db/connect.ts';
import { createRealtimeResolver } from '../realtime/realtime-resolver.ts';
import { RealtimeConfigError } from '../realtime/realtime-types.ts';
import { StorageError } from '../storage/object-storage.ts';
import type { Services } from '../services/index.ts';
import type { ObjectStorage } from '../storage/index.ts';

export const SESSION_FACE_DEFAULTS = {
  /** Used when the agent has no face_id. */
  configId: 'svc/human-portrait',
  width: 640,
  height: 360,
} as const;

export interface SessionFaceAgent {
  readonly organization_id?: string;
  readonly face_id?: string | null;
}

export type SessionFaceOpener = (agent: SessionFaceAgent, clock: Clock, limits: { readonly maxDimension: number | undefined }) => Promise<FaceSession>;

const even = (n: number) => Math.max(128, Math.floor(n / 2) * 2);

/** The canvas for a session: configured or default size, the larger side capped at `maxDimension`. */
export function sessionCanvas(configuration: Record<string, unknown>, maxDimension: number | undefined): { width: number; height: number } {
  const width = typeof configuration['width'] === 'number' ? configuration['width'] : SESSION_FACE_DEFAULTS.width;
  const height = typeof configuration['height'] === 'number' ? configuration['height'] : SESSION_FACE_DEFAULTS.height;
  const largest = Math.max(width, height);
  if (!maxDimension || maxDimension >= largest) return { width, height };
  const scale = maxDimension / largest;
  return { width: even(width * scale), height: even(height * scale) };
}

/**
 * What a session's face is made of, resolved from the database and storage: the face model's
 * slug, the reference image (with its stored landmarks when known) and the configuration (its
 * canvas not yet applied). Plain data: it crosses to a bot host process as it is.
 */
export interface ResolvedSessionFace {
  readonly faceSlug: string;
  readonly referenceImage: Uint8Array | FaceReference | undefined;
  readonly configuration: Record<string, unknown>;
}

export type SessionFaceResolver = (agent: SessionFaceAgent) => Promise<ResolvedSessionFace>;

/**
 * An agent's face could not be resolved or read (its configuration or reference image is gone,
 * or this process's storage lacks the image another process wrote): the session ends
 * `bot_start_failed` with failure_reason `face_unavailable` (docs/sessions.md).
 */
export class FaceUnavailableError extends Error {
  readonly failureCode = 'face_unavailable';
  constructor(message: string) {
    super(message);
    this.name = 'FaceUnavailableError';
  }
}

/** A message without file system paths (a storage error names its files; call records and visitors must not see them). */
export function withoutPaths(message: string): string {
  return message.replace(/(?:[A-Za-z]:)?[\\/](?:[^\s'"\\/]+[\\/])+[^\s'",)]*/g, '<path>');
}

/** Resolves an agent's face: its `face_id`, or `svc/human-portrait` when it has none. */
export function createSessionFaceResolver(deps: { db: Db; storage: ObjectStorage; registry: Registry; services: Pick<Services, 'apiKeys' | 'modelConfigs'> }): SessionFaceResolver {
  const resolver = createRealtimeResolver(deps);
  return async (agent) => {
    const organizationId = agent.organization_id ?? '';
    const configId = agent.face_id ?? SESSION_FACE_DEFAULTS.configId;
    const resolved = await resolver.resolveConfig({ organizationId, principal: 'session' }, configId).catch((err: unknown) => {
      // The face itself is the problem (its configuration, its image in storage); anything else
      // (the database unavailable, ...) is not the face's and keeps its own error.
      if (err instanceof RealtimeConfigError || err instanceof StorageError) throw new FaceUnavailableError(`the agent's face ${configId} cannot be opened: ${withoutPaths(err.message)}`);
      throw err;
    });
    if (!resolved) throw new FaceUnavailableError(`face configuration ${configId} cannot be resolved for this agent`);
    return { faceSlug: resolved.faceSlug, referenceImage: resolved.referenceImage, configuration: resolved.configuration };
  };
}

/**
 * Opens resolved faces with the models of `registry` (one model per slug, kept: a model holds its
 * render worker and prepared faces). The canvas (`sessionCanvas`) is applied here.
 */
export function createResolvedFaceOpener(registry: Registry): (face: ResolvedSessionFace, clock: Clock, limits: { readonly maxDimension: number | undefined }) => Promise<FaceSession> {
  const models = new Map<string, FaceModel>();
  return async (face, clock, limits) => {
    let model = models.get(face.faceSlug);
    if (!model) {
      model = registry.create<FaceModel>('face', face.faceSlug, {});
      models.set(face.faceSlug, model);
    }
    const configuration = { ...face.configuration, ...sessionCanvas(face.configuration, limits.maxDimension) };
    // I420: what the WebRTC video source takes, made on the face's render worker (no conversion
    // on this event loop); a model that cannot make it sends another format and the publisher converts.
    return model.openSession({ ...(face.referenceImage ? { referenceImage: face.referenceImage } : {}), configuration, imageFormat: 'i420' }, clock);
  };
}

export function createSessionFaceOpener(deps: { db: Db; storage: ObjectStorage; registry: Registry; services: Pick<Services, 'apiKeys' | 'modelConfigs'> }): SessionFaceOpener {
  const resolve = createSessionFaceResolver(deps);
  const open = createResolvedFaceOpener(deps.registry);
  return async (agent, clock, limits) => open(await resolve(agent), clock, limits);
}
