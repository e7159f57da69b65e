/**
 * The /realtime endpoint's view of the REST data: API keys, model configurations (the caller's
 * organization's or the template organization's, or a template alias such as
 * `svc/human-portrait`), and the reference image asset with the landmarks the face plugin
 * stored when the image was uploaded (so no session ever runs face detection again).
 *
 * A configuration the key can read but that cannot run is refused with a code naming the
 * problem (`config_reference_missing`, `config_reference_not_image`, `config_no_face`,
 * `config_variant_unavailable`), from the same `reference_check` the REST API shows. A check
 * still pending does not refuse: the session runs the landmark pass itself (shared with the
 * pending one in this process) and a failure of it gets the same precise codes.
 */
import type { Registry } from '../../core/registry.ts';
import type { FaceLandmarks, FaceReference } from '../../processors/avatar/face-model.ts';
import type { Db } from '../db/connect.ts';
import { RevocationWatcher } from '../services/api-keys.ts';
import { imageTooLarge } from '../services/asset-hooks.ts';
import type { Services } from '../services/index.ts';
import { TEMPLATE_ORGANIZATION } from '../services/organizations.ts';
import { StorageUnavailableError, type ObjectStorage } from '../storage/index.ts';
import { RealtimeConfigError, type RealtimeResolver, type ResolvedFaceConfig } from './realtime-endpoint.ts';
import type { ReferenceCheck } from '../services/model-config-checks.ts';
import type { RealtimeErrorCode } from '../../protocol/realtime.ts';
import { errorMessage } from '../../core/error-message.ts';

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

/** The /realtime code of a failed reference check; `check_failed` (unexplained) is retried by the session. */
const CHECK_FAILURE_CODES: Readonly<Record<string, RealtimeErrorCode>> = {
  reference_missing: 'config_reference_missing',
  not_image: 'config_reference_not_image',
  no_face: 'config_no_face',
};

function refuseFailedCheck(configId: string, check: ReferenceCheck | null): void {
  if (check?.status !== 'failed' || !check.reason) return;
  const code = CHECK_FAILURE_CODES[check.reason];
  if (code) throw new RealtimeConfigError(code, `model configuration ${configId}: ${check.message ?? check.reason}`, { config_id: configId, asset_id: check.asset_id, reason: check.reason });
}

export function createRealtimeResolver(deps: RealtimeResolverDeps): RealtimeResolver {
  const revocations = new RevocationWatcher(deps.services.apiKeys, {
    intervalMs: deps.revocationCheckIntervalMs,
    onError: (error) => deps.log?.('realtime.revocation_check_failed', { error: errorMessage(error) }),
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
      if (!faceSlug) {
        throw new RealtimeConfigError('config_variant_unavailable', `model configuration ${config.model_config_id} uses model variant ${config.model_variant_id}, which this server does not serve`, { config_id: config.model_config_id, model_variant_id: config.model_variant_id });
      }
      refuseFailedCheck(config.model_config_id, config.reference_check);
      const configuration = { ...(config.model_configurations as Record<string, unknown>) };
      const assetId = configuration['reference_image_asset_id'];
      let referenceImage: Uint8Array | FaceReference | undefined;
      if (typeof assetId === 'string') {
        const missing = () => new RealtimeConfigError('config_reference_missing', `model configuration ${config.model_config_id}: reference image asset ${assetId} does not exist (or was deleted)`, { config_id: config.model_config_id, asset_id: assetId, reason: 'reference_missing' });
        const isUuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(assetId);
        const row = isUuid
          ? await deps.db('assets')
            .where('asset_id', assetId)
            .whereIn('organization_id', [principal.organizationId, TEMPLATE_ORGANIZATION.organization_id])
            .first('storage_key', 'size_bytes', 'analysis')
          : undefined;
        if (!row) throw missing();
        const tooLarge = imageTooLarge(Number(row.size_bytes));
        if (tooLarge) throw new RealtimeConfigError('config_reference_not_image', `model configuration ${config.model_config_id}: reference image asset ${assetId}: ${tooLarge}`, { config_id: config.model_config_id, asset_id: assetId, reason: 'not_image' });
        let image: Uint8Array;
        try {
          image = new Uint8Array(await deps.storage.getObject(row.storage_key));
        } catch (err) {
          deps.log?.('realtime.reference_unreadable', { config_id: config.model_config_id, asset_id: assetId, error: errorMessage(err) });
          // The storage failing is not the configuration's fault: not reported as a missing reference.
          if (err instanceof StorageUnavailableError) throw err;
          throw missing();
        }
        const landmarks = storedLandmarks(row.analysis);
        referenceImage = landmarks ? { image, landmarks } : image;
      }
      return { configId: config.model_config_id, modelVariantId: config.model_variant_id, faceSlug, configuration, referenceImage };
    },
  };
}
