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
import type { FaceModel, FaceSession } from '../../processors/avatar/face-model.ts';
import type { Db } from '../db/connect.ts';
import { createRealtimeResolver } from '../realtime/realtime-resolver.ts';
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

export function createSessionFaceOpener(deps: { db: Db; storage: ObjectStorage; registry: Registry; services: Pick<Services, 'apiKeys' | 'modelConfigs'> }): SessionFaceOpener {
  const resolver = createRealtimeResolver(deps);
  const models = new Map<string, FaceModel>();
  return async (agent, clock, limits) => {
    const organizationId = agent.organization_id ?? '';
    const configId = agent.face_id ?? SESSION_FACE_DEFAULTS.configId;
    const resolved = await resolver.resolveConfig({ organizationId, principal: 'session' }, configId);
    if (!resolved) throw new Error(`face configuration ${configId} cannot be resolved for this agent`);
    let model = models.get(resolved.faceSlug);
    if (!model) {
      model = deps.registry.create<FaceModel>('face', resolved.faceSlug, {});
      models.set(resolved.faceSlug, model);
    }
    const configuration = { ...resolved.configuration, ...sessionCanvas(resolved.configuration, limits.maxDimension) };
    // I420: what the WebRTC video source takes, made on the face's render worker (no conversion
    // on this event loop); a model that cannot make it sends another format and the publisher converts.
    return model.openSession({ referenceImage: resolved.referenceImage, configuration, imageFormat: 'i420' }, clock);
  };
}
