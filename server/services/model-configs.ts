import { randomUUID } from 'node:crypto';
import { Ajv, type ValidateFunction } from 'ajv';
import type { Logger } from 'pino';
import type { Registry } from '../../core/registry.ts';
import type { Db } from '../db/connect.ts';
import { isUniqueViolation } from '../db/connect.ts';
import { isoRequired } from '../db/row-values.ts';
import { ApiError } from '../http/api-error.ts';
import { envelope, type ListEnvelope, type Page } from '../http/pagination.ts';
import type { Principal } from '../http/principal.ts';
import type { ObjectStorage } from '../storage/object-storage.ts';
import { ASSET_HOOK_KIND } from './asset-hooks.ts';
import type { Assets } from './assets.ts';
import {
  loadReferenceAssets, referenceAssetIdOf, referenceCheckOf, REFERENCE_CHECK_LIMITS, validateReferenceAsset,
  type ReferenceAssetRow, type ReferenceCheck,
} from './model-config-checks.ts';
import { TEMPLATE_ORGANIZATION } from './organizations.ts';

export const toModelConfig = (row: any, reference_check: ReferenceCheck | null = null) => ({
  model_config_id: row.model_config_id,
  organization_id: row.organization_id,
  model_id: row.model_id,
  model_variant_id: row.model_variant_id,
  created_by: row.created_by,
  title: row.title,
  model_configurations: row.model_configurations ?? {},
  created_at: isoRequired(row.created_at),
  updated_at: isoRequired(row.updated_at),
  reference_check,
});

export type ModelConfig = ReturnType<typeof toModelConfig>;

export const toPublicModelConfig = (c: ModelConfig) => ({
  model_config_id: c.model_config_id,
  model_variant_id: c.model_variant_id,
  title: c.title,
  model_configurations: c.model_configurations,
  created_at: c.created_at,
  updated_at: c.updated_at,
});

export interface ModelConfigFilter {
  model_variant_id?: string;
  model_variant_tag?: string;
  source?: 'org' | 'template';
}

/** Validates model_configurations against variant schemas; never fills defaults (stored as sent). */
const schemaAjv = new Ajv({ allErrors: true, strict: false });
const validators = new Map<string, ValidateFunction>();

const notFound = (id: string) => new ApiError('model_config_not_found', `model configuration ${id} not found`, { model_config_id: id });
const titleConflict = (title: string) => new ApiError('title_conflict', `a model configuration titled "${title}" already exists in this organization`, { title });

/** What the reference-image checks need; without it (unit use) no reference is checked. */
export interface ModelConfigDeps {
  readonly storage: ObjectStorage;
  readonly registry: Registry;
  /** Runs the asset hooks an asset has not had yet (the face check of older assets). */
  readonly assets?: Pick<Assets, 'ensureAnalysed'>;
  readonly logger?: Logger;
}

export class ModelConfigs {
  constructor(
    private readonly db: Db,
    private readonly deps?: ModelConfigDeps,
  ) {}

  /** Whether this server runs the face check (the face plugin's landmark hook). */
  private get faceCheckInstalled(): boolean {
    return !!this.deps?.registry.slugs(ASSET_HOOK_KIND).includes(REFERENCE_CHECK_LIMITS.faceHook);
  }

  /** Rows to ModelConfigs with their `reference_check` (one query for all reference assets). */
  private async withChecks(rows: any[]): Promise<ModelConfig[]> {
    const ids = rows.map((r) => referenceAssetIdOf(r.model_configurations)).filter((id): id is string => id !== undefined);
    const assets = ids.length ? await loadReferenceAssets(this.db, ids) : new Map<string, ReferenceAssetRow>();
    const installed = this.faceCheckInstalled;
    return rows.map((r) => toModelConfig(r, referenceCheckOf(r.model_configurations, r.organization_id, assets, installed)));
  }

  /** Write-time validation of the reference image (404 / 400, see model-config-checks.ts). */
  private async validateReference(organizationId: string, configurations: Record<string, unknown>): Promise<ReferenceAssetRow | undefined> {
    if (!this.deps) return undefined;
    return validateReferenceAsset(this.db, this.deps.storage, organizationId, configurations);
  }

  /** After a write: start the face check of an asset that never had it (runs once per asset). */
  private startFaceCheck(asset: ReferenceAssetRow | undefined): void {
    if (!asset || asset.face || !this.deps?.assets || !this.faceCheckInstalled) return;
    this.deps.assets.ensureAnalysed(asset.asset_id).catch((err: unknown) => this.deps?.logger?.warn({ err, asset_id: asset.asset_id }, 'starting the face check of a reference image failed'));
  }

  async list(principal: Principal, filter: ModelConfigFilter, page: Page): Promise<ListEnvelope<ModelConfig>> {
    const org = filter.source === 'template' ? TEMPLATE_ORGANIZATION.organization_id : principal.organizationId;
    const scope = this.db('model_configs as c').where('c.organization_id', org);
    if (filter.model_variant_id) scope.where('c.model_variant_id', filter.model_variant_id);
    if (filter.model_variant_tag) {
      scope.join('model_variants as v', 'v.model_variant_id', 'c.model_variant_id').whereRaw('v.tags @> ?::jsonb', [JSON.stringify([filter.model_variant_tag])]);
    }
    const [rows, total] = await Promise.all([
      scope.clone().select('c.*').orderBy([{ column: 'c.created_at', order: 'desc' }, { column: 'c.model_config_id' }]).limit(page.limit).offset(page.offset),
      scope.clone().count('* as n').first(),
    ]);
    return envelope(await this.withChecks(rows), page, Number(total?.n ?? 0));
  }

  async create(principal: Principal, body: { title: string; model_variant_id: string; model_configurations: Record<string, unknown> }): Promise<ModelConfig> {
    const variant = await this.publicVariant(body.model_variant_id);
    this.validateConfigurations(variant, body.model_configurations);
    const reference = await this.validateReference(principal.organizationId, body.model_configurations);
    const id = randomUUID();
    try {
      await this.db('model_configs').insert({
        model_config_id: id,
        organization_id: principal.organizationId,
        model_id: variant.model_id,
        model_variant_id: variant.model_variant_id,
        created_by: principal.createdBy,
        title: body.title,
        model_configurations: JSON.stringify(body.model_configurations),
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw titleConflict(body.title);
      throw err;
    }
    this.startFaceCheck(reference);
    return this.get(principal, id);
  }

  /** Own and template configurations are readable. */
  async get(principal: Principal, id: string): Promise<ModelConfig> {
    const row = await this.db('model_configs')
      .where('model_config_id', id)
      .whereIn('organization_id', [principal.organizationId, TEMPLATE_ORGANIZATION.organization_id])
      .first();
    if (!row) throw notFound(id);
    return (await this.withChecks([row]))[0]!;
  }

  async getPublic(id: string) {
    const row = await this.db('model_configs').where('model_config_id', id).first();
    if (!row) throw notFound(id);
    return toPublicModelConfig(toModelConfig(row));
  }

  async replace(principal: Principal, id: string, body: { title: string; model_configurations: Record<string, unknown> }): Promise<ModelConfig> {
    const current = await this.owned(principal, id, 'modified');
    const variant = await this.db('model_variants').where('model_variant_id', current.model_variant_id).first();
    this.validateConfigurations(variant, body.model_configurations);
    const reference = await this.validateReference(principal.organizationId, body.model_configurations);
    try {
      await this.db('model_configs').where('model_config_id', id).update({
        title: body.title,
        model_configurations: JSON.stringify(body.model_configurations),
        updated_at: this.db.fn.now(),
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw titleConflict(body.title);
      throw err;
    }
    this.startFaceCheck(reference);
    return this.get(principal, id);
  }

  /**
   * Deletes a configuration. While agents use it (as `face_id`) this is a 409, unless
   * `referencedBy` names the only referencing agent: its reference is cleared first.
   */
  async delete(principal: Principal, id: string, referencedBy?: string): Promise<void> {
    await this.owned(principal, id, 'deleted');
    // PostgreSQL gives uuids in lower case; a client may write them in upper case (path ids work either way).
    referencedBy = referencedBy?.toLowerCase();
    await this.db.transaction(async (trx) => {
      // Locked first: an agent write referencing it (its FOR SHARE lock) commits before the count
      // below sees it, or waits and then finds it gone.
      if (!(await trx('model_configs').where('model_config_id', id).forUpdate().first('model_config_id'))) return;
      const users: string[] = (await trx('agents').where('face_id', id).forUpdate().select('agent_id')).map((r) => r.agent_id);
      const blocking = users.filter((agentId) => agentId !== referencedBy);
      if (blocking.length) {
        throw new ApiError('model_config_in_use', `model configuration ${id} is referenced by ${blocking.length} agent(s)`, { agent_ids: blocking });
      }
      if (referencedBy && users.includes(referencedBy)) {
        await trx('agents').where('agent_id', referencedBy).update({ face_id: null, updated_at: trx.fn.now() });
      }
      await trx('model_configs').where('model_config_id', id).delete();
    });
  }

  /**
   * Resolves a real-time `config_id`: a model_config_id visible to the organization, or a
   * model id alias (`svc/human-portrait`) naming the template configuration of that model.
   */
  async resolveConfigId(organizationId: string, configId: string): Promise<ModelConfig | undefined> {
    const visible = [organizationId, TEMPLATE_ORGANIZATION.organization_id];
    const isUuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(configId);
    const row = isUuid
      ? await this.db('model_configs').where('model_config_id', configId).whereIn('organization_id', visible).first()
      : await this.db('model_configs').where({ model_id: configId, organization_id: TEMPLATE_ORGANIZATION.organization_id }).orderBy('created_at').first();
    return row ? (await this.withChecks([row]))[0] : undefined;
  }

  private async owned(principal: Principal, id: string, verb: string): Promise<any> {
    const row = await this.db('model_configs')
      .where('model_config_id', id)
      .whereIn('organization_id', [principal.organizationId, TEMPLATE_ORGANIZATION.organization_id])
      .first();
    if (!row) throw notFound(id);
    if (row.organization_id !== principal.organizationId) {
      throw new ApiError('template_read_only', `template model configuration ${id} cannot be ${verb}`, { model_config_id: id });
    }
    return row;
  }

  /** API-key callers may only configure public variants; others are a 404 (spec). */
  private async publicVariant(variantId: string): Promise<any> {
    const variant = await this.db('model_variants').where('model_variant_id', variantId).first();
    if (!variant || variant.status !== 'public') {
      throw new ApiError('model_variant_not_found', `model variant ${variantId} not found`, { model_variant_id: variantId });
    }
    return variant;
  }

  private validateConfigurations(variant: any, configurations: Record<string, unknown>): void {
    const cacheKey = `${variant.model_variant_id}@${new Date(variant.updated_at).getTime()}`;
    let validate = validators.get(cacheKey);
    if (!validate) {
      validate = schemaAjv.compile(variant.configuration_schema ?? {});
      validators.set(cacheKey, validate);
    }
    if (!validate(configurations)) {
      const issues = (validate.errors ?? []).map((e) => ({
        location: 'body',
        path: `/model_configurations${e.instancePath}`,
        message: e.message ?? 'invalid',
        ...((e.params as { additionalProperty?: string }).additionalProperty ? { property: (e.params as { additionalProperty: string }).additionalProperty } : {}),
      }));
      const first = issues[0]!;
      throw new ApiError('validation_failed', `model_configurations does not match the schema of ${variant.model_variant_id}: ${first.path} ${first.message}`, { issues });
    }
  }
}
