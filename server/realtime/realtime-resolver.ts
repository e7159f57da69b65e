/**
 * The /realtime endpoint's view of the REST data: API keys, model configurations (the caller's
 * organization's or the template organization's, or a template alias such as
 * `svc/human-portrait`), and the reference image asset with the landmarks the face plugin
 * stored when the image was uploaded (so no session ever runs face detection again).
 */
import type { Registry } from '../../core/registry.ts';
import type { FaceLandmarks, FaceReference } from '../../processors/avatar/face-model.ts';
import type { Db } from '../db/connect.ts';
import { RevocationWatcher } from '../services/api-keys.ts';
import type { Services } from '../services/index.ts';
import { TEMPLATE_ORGANIZATION } from '../services/organizations.ts';
import type { ObjectStorage } from '../storage/index.ts';
import type { RealtimeResolver, ResolvedFaceConfig } from './realtime-endpoint.ts';

export interface RealtimeResolverDeps {
  readonly db: Db;
  readonly storage: ObjectStorage;
  readonly registry: Registry;
  readonly services: Pick<Services, 'apiKeys' | 'modelConfigs'>;
  /** How often watched keys are re-checked for revocation by other processes (default API_KEY_REVOCATION.checkIntervalMs). */
  readonly revocationCheckIntervalMs?: number;
  readonly log?: (event: string, details: Record<string, unknown>) => void;
}

/** Slug of the face plugin serving a model variant, from the plugins' catalogue descriptors. */
function faceSlugFor(registry: Registry, modelVariantId: string): string | undefined {
  return registry.list('face').find((entry) => entry.descriptor?.['model_variant_id'] === modelVariantId)?.slug;
}

function storedLandmarks(analysis: unknown): FaceLandmarks | undefined {
  const candidate = (analysis as Record<string, unknown> | null)?.['face-landmarks'] as FaceLandmarks | undefined;
  return candidate && candidate.version === 1 && Array.isArray(candidate.points) ? candidate : undefined;
}

export function createRealtimeResolver(deps: RealtimeResolverDeps): RealtimeResolver {
  const revocations = new RevocationWatcher(deps.services.apiKeys, {
    intervalMs: deps.revocationCheckIntervalMs,
    onError: (error) => deps.log?.('realtime.revocation_check_failed', { error: error instanceof Error ? error.message : String(error) }),
  });
  return {
    async authenticate(apiKey) {
      if (apiKey.length > 200) return null;
      const principal = await deps.services.apiKeys.authenticateCached(apiKey);
      return principal ? { organizationId: principal.organizationId, principal: principal.createdBy, apiKeyId: principal.apiKeyId } : null;
    },
    watchRevocation(principal, onRevoked) {
      return principal.apiKeyId ? revocations.watch(principal.apiKeyId, onRevoked) : () => undefined;
    },
    async resolveConfig(principal, configId): Promise<ResolvedFaceConfig | null> {
      if (configId.length > 200) return null;
      const config = await deps.services.modelConfigs.resolveConfigId(principal.organizationId, configId);
      if (!config) return null;
      const faceSlug = faceSlugFor(deps.registry, config.model_variant_id);
      if (!faceSlug) return null;
      const configuration = { ...(config.model_configurations as Record<string, unknown>) };
      const assetId = configuration['reference_image_asset_id'];
      let referenceImage: Uint8Array | FaceReference | undefined;
      if (typeof assetId === 'string') {
        const row = await deps.db('assets')
          .where('asset_id', assetId)
          .whereIn('organization_id', [principal.organizationId, TEMPLATE_ORGANIZATION.organization_id])
          .first('storage_key', 'analysis');
        if (!row) return null;
        const image = new Uint8Array(await deps.storage.getObject(row.storage_key));
        const landmarks = storedLandmarks(row.analysis);
        referenceImage = landmarks ? { image, landmarks } : image;
      }
      return { configId: config.model_config_id, modelVariantId: config.model_variant_id, faceSlug, configuration, referenceImage };
    },
  };
}
