import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { Registry } from '../../core/registry.ts';
import type { Db } from '../db/connect.ts';
import { iso, isoRequired } from '../db/row-values.ts';
import { ApiError } from '../http/api-error.ts';
import type { Principal } from '../http/principal.ts';
import type { ObjectStorage } from '../storage/object-storage.ts';
import { isImageAsset } from './asset-hooks.ts';
import type { Assets } from './assets.ts';

export const GENERATION_JOB_TIMING = {
  /** A running job's `updated_at` is touched this often. */
  heartbeatMs: 30_000,
  /** Unfinished jobs untouched this long are failed at start-up (their runner is gone). */
  staleAfterMs: 120_000,
} as const;

/** Registry kind of idle video generators; the slug is the `<generator>` path segment. */
export const IDLE_VIDEO_GENERATOR_KIND = 'idle-video-generator';

export interface IdleVideoRequest {
  sourceImage: Buffer;
  sourceContentType: string | null;
  referenceTemplate: string | null;
  modelVariantId: string | null;
  signal: AbortSignal;
}

export interface IdleVideoGenerator {
  generate(request: IdleVideoRequest): Promise<{ data: Buffer; contentType: string; name: string }>;
}

export interface GenerateBody {
  source_asset_id: string;
  reference_template?: string;
  model_variant_id?: string;
  target_model_config_id?: string;
}

const toJob = (row: any) => ({
  job_id: row.job_id,
  generator: row.generator,
  status: row.status,
  source_asset_id: row.source_asset_id,
  reference_template: row.reference_template,
  model_variant_id: row.model_variant_id,
  target_model_config_id: row.target_model_config_id,
  result: row.result ?? null,
  error: row.error ?? null,
  created_at: isoRequired(row.created_at),
  updated_at: iso(row.updated_at),
});

/**
 * Idle video generation jobs: `queued` on creation, `running` while the generator works,
 * then `succeeded` (result.asset_id set) or `failed` (error set). Jobs run in this process;
 * a restart fails the ones it interrupted rather than leaving them `running` forever.
 */
export class GenerationJobs {
  private readonly running = new Set<Promise<void>>();
  private readonly abort = new AbortController();

  constructor(
    private readonly db: Db,
    private readonly registry: Registry,
    private readonly assets: Assets,
    private readonly storage: ObjectStorage,
    private readonly logger: Logger,
  ) {}

  async create(principal: Principal, generator: string, body: GenerateBody): Promise<{ job_id: string }> {
    if (!this.registry.has(IDLE_VIDEO_GENERATOR_KIND, generator)) {
      throw new ApiError('generator_not_found', `no idle video generator named "${generator}"`, { generator, known: this.registry.slugs(IDLE_VIDEO_GENERATOR_KIND) });
    }
    const source = await this.assets.ownedRow(principal, body.source_asset_id);
    if (!isImageAsset(source)) {
      throw new ApiError('validation_failed', `source asset ${body.source_asset_id} is not an image`, { issues: [{ location: 'body', path: '/source_asset_id', message: 'must be an image asset' }] });
    }
    if (body.target_model_config_id) {
      const target = await this.db('model_configs').where({ model_config_id: body.target_model_config_id, organization_id: principal.organizationId }).first('model_config_id');
      if (!target) throw new ApiError('model_config_not_found', `model configuration ${body.target_model_config_id} not found`, { model_config_id: body.target_model_config_id });
    }
    const jobId = randomUUID();
    await this.db('generation_jobs').insert({
      job_id: jobId,
      organization_id: principal.organizationId,
      created_by: principal.createdBy,
      generator,
      source_asset_id: body.source_asset_id,
      reference_template: body.reference_template ?? null,
      model_variant_id: body.model_variant_id ?? null,
      target_model_config_id: body.target_model_config_id ?? null,
      status: 'queued',
    });
    const run = this.run(jobId, principal, source);
    this.running.add(run);
    void run.finally(() => this.running.delete(run));
    return { job_id: jobId };
  }

  async get(principal: Principal, jobId: string) {
    const row = await this.db('generation_jobs').where({ job_id: jobId, organization_id: principal.organizationId }).first();
    if (!row) throw new ApiError('job_not_found', `generation job ${jobId} not found`, { job_id: jobId });
    return toJob(row);
  }

  /**
   * Marks unfinished jobs whose runner stopped touching them as failed. A live runner (this or
   * another server instance) touches `updated_at` every `GENERATION_JOB_TIMING.heartbeatMs`.
   */
  async failInterrupted(): Promise<number> {
    return this.db('generation_jobs')
      .whereIn('status', ['queued', 'running'])
      .where('updated_at', '<', new Date(Date.now() - GENERATION_JOB_TIMING.staleAfterMs))
      .update({ status: 'failed', error: 'interrupted by a server restart', updated_at: this.db.fn.now() });
  }

  async close(): Promise<void> {
    this.abort.abort();
    await Promise.allSettled([...this.running]);
  }

  async settled(): Promise<void> {
    while (this.running.size) await Promise.allSettled([...this.running]);
  }

  private async run(jobId: string, principal: Principal, source: any): Promise<void> {
    const job = await this.db('generation_jobs').where('job_id', jobId).first();
    const heartbeat = setInterval(() => {
      void this.db('generation_jobs').where({ job_id: jobId, status: 'running' }).update({ updated_at: this.db.fn.now() }).catch(() => undefined);
    }, GENERATION_JOB_TIMING.heartbeatMs);
    heartbeat.unref();
    try {
      await this.db('generation_jobs').where('job_id', jobId).update({ status: 'running', updated_at: this.db.fn.now() });
      const generator = this.registry.create<IdleVideoGenerator>(IDLE_VIDEO_GENERATOR_KIND, job.generator);
      const video = await generator.generate({
        sourceImage: await this.storage.getObject(source.storage_key),
        sourceContentType: source.content_type,
        referenceTemplate: job.reference_template,
        modelVariantId: job.model_variant_id,
        signal: this.abort.signal,
      });
      const asset = await this.assets.createFromBytes(principal.organizationId, job.created_by, {
        name: video.name,
        category: 'video',
        content_type: video.contentType,
        data: video.data,
      });
      await this.db.transaction(async (trx) => {
        if (job.target_model_config_id) {
          await trx('model_configs')
            .where({ model_config_id: job.target_model_config_id, organization_id: principal.organizationId })
            .update({
              model_configurations: trx.raw(`jsonb_set(model_configurations, '{preview}', ?::jsonb)`, [JSON.stringify(asset.asset_id)]),
              updated_at: trx.fn.now(),
            });
        }
        await trx('generation_jobs').where('job_id', jobId).update({ status: 'succeeded', result: JSON.stringify({ asset_id: asset.asset_id }), updated_at: trx.fn.now() });
      });
    } catch (err) {
      this.logger.warn({ err, job_id: jobId }, 'generation job failed');
      await this.db('generation_jobs')
        .where('job_id', jobId)
        .update({ status: 'failed', error: (err as Error).message || 'generation failed', updated_at: this.db.fn.now() })
        .catch(() => undefined);
    } finally {
      clearInterval(heartbeat);
    }
  }
}
