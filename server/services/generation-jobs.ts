import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { Registry } from '../../core/registry.ts';
import type { Knex } from 'knex';
import { countOf, type Db } from '../db/connect.ts';
import { iso, isoRequired } from '../db/row-values.ts';
import { ApiError } from '../http/api-error.ts';
import type { Principal } from '../http/principal.ts';
import { JobQueue, type ClaimedJob } from '../jobs/job-queue.ts';
import { resolveJobSettings, type JobSettings } from '../jobs/job-settings.ts';
import { failedAs, JobWorker, withFailureReason, type JobContext, type JobFailureCounts, type JobOutcome } from '../jobs/job-worker.ts';
import type { ObjectStorage } from '../storage/object-storage.ts';
import { imageTooLarge, isImageAsset } from './asset-hooks.ts';
import type { Assets } from './assets.ts';
import { TEMPLATE_ORGANIZATION } from './organizations.ts';

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
  attempts: row.attempts,
  max_attempts: row.max_attempts,
  next_attempt_at: row.status === 'queued' ? iso(row.run_after) : null,
  last_error: row.last_error ?? null,
  created_at: isoRequired(row.created_at),
  updated_at: iso(row.updated_at),
});

/**
 * Idle video generation jobs (docs/jobs.md): `queued` on creation, `running` while a worker
 * generates, then `succeeded` (result.asset_id set) or `failed` (error set) after the last of
 * `max_attempts` attempts. Jobs live in the database queue (server/jobs): any worker process runs
 * them, and one interrupted by a crash is retried. `startWorker` runs a worker in this process.
 */
export class GenerationJobs {
  readonly settings: JobSettings;
  private readonly queue: JobQueue;
  private worker: JobWorker | null = null;

  constructor(
    private readonly db: Db,
    private readonly registry: Registry,
    private readonly assets: Assets,
    private readonly storage: ObjectStorage,
    private readonly logger: Logger,
    settings: Partial<JobSettings> = {},
  ) {
    this.settings = resolveJobSettings(settings);
    this.queue = new JobQueue(db, this.settings);
  }

  async create(principal: Principal, generator: string, body: GenerateBody): Promise<{ job_id: string }> {
    if (!this.registry.has(IDLE_VIDEO_GENERATOR_KIND, generator)) {
      throw new ApiError('generator_not_found', `no idle video generator named "${generator}"`, { generator, known: this.registry.slugs(IDLE_VIDEO_GENERATOR_KIND) });
    }
    const source = await this.assets.ownedRow(principal, body.source_asset_id);
    if (!isImageAsset(source)) {
      throw new ApiError('validation_failed', `source asset ${body.source_asset_id} is not an image`, { issues: [{ location: 'body', path: '/source_asset_id', message: 'must be an image asset' }] });
    }
    const tooLarge = imageTooLarge(Number(source.size_bytes));
    if (tooLarge) {
      throw new ApiError('validation_failed', `source asset ${body.source_asset_id}: ${tooLarge}`, { issues: [{ location: 'body', path: '/source_asset_id', message: tooLarge }] });
    }
    if (body.target_model_config_id) {
      const target = await this.db('model_configs').where({ model_config_id: body.target_model_config_id, organization_id: principal.organizationId }).first('model_config_id');
      if (!target) throw new ApiError('model_config_not_found', `model configuration ${body.target_model_config_id} not found`, { model_config_id: body.target_model_config_id });
    }
    const jobId = randomUUID();
    const limit = this.settings.maxQueuedPerOrganization;
    await this.db.transaction(async (trx) => {
      // Counted and inserted under the organization's lock: concurrent requests cannot pass the bound together.
      await trx.raw('SELECT pg_advisory_xact_lock(hashtext(?))', [`svc.generation_jobs.queue:${principal.organizationId}`]);
      const queued = countOf(await trx('generation_jobs').where({ organization_id: principal.organizationId, status: 'queued' }).count('* as n').first());
      if (queued >= limit) {
        throw new ApiError('too_many_jobs', `this organization has ${queued} generation jobs waiting, the most it may have (SVC_JOB_MAX_QUEUED); try again when some have started`, { queued, limit });
      }
      await this.insertJob(trx, principal, generator, body, jobId);
    });
    this.worker?.wake();
    return { job_id: jobId };
  }

  private async insertJob(trx: Knex.Transaction, principal: Principal, generator: string, body: GenerateBody, jobId: string): Promise<void> {
    await trx('generation_jobs').insert({
      job_id: jobId,
      organization_id: principal.organizationId,
      created_by: principal.createdBy,
      generator,
      source_asset_id: body.source_asset_id,
      reference_template: body.reference_template ?? null,
      model_variant_id: body.model_variant_id ?? null,
      target_model_config_id: body.target_model_config_id ?? null,
      status: 'queued',
      max_attempts: this.settings.maxAttempts,
      result_asset_id: randomUUID(),
    });
  }

  async get(principal: Principal, jobId: string) {
    const row = await this.db('generation_jobs').where({ job_id: jobId, organization_id: principal.organizationId }).first();
    if (!row) throw new ApiError('job_not_found', `generation job ${jobId} not found`, { job_id: jobId });
    return toJob(row);
  }

  /** Runs a worker in this process (`npm start` unless SVC_WORKER=off; `npm run worker`). */
  startWorker(): JobWorker {
    this.worker ??= new JobWorker(this.queue, this.settings, (job, context) => this.execute(job, context), this.logger).start();
    return this.worker;
  }

  async close(): Promise<void> {
    await this.worker?.close();
  }

  /** Deletes finished jobs older than the retention (`SVC_JOB_RETENTION_MS`); returns how many. */
  sweepFinished(): Promise<number> {
    return this.queue.sweepFinished(this.settings.retentionMs);
  }

  /** Jobs queued and running in the shared queue (every worker's), for metrics. */
  depth(): Promise<{ queued: number; running: number }> {
    return this.queue.depth();
  }

  /** Failed attempts recorded by this process's worker, by reason class (none without a worker). */
  failures(): JobFailureCounts {
    return this.worker?.failures() ?? {};
  }

  /**
   * Waits until no job in the database is running or due (tests): each has ended or waits for its
   * next attempt. Returns at once in a process without a worker (nothing here would run them).
   */
  async settled(): Promise<void> {
    const worker = this.worker;
    if (!worker) return;
    for (;;) {
      await worker.idle();
      if (!(await this.queue.busy())) return;
      worker.wake();
      await new Promise((resolve) => setTimeout(resolve, Math.min(50, this.settings.pollMs)));
    }
  }

  /**
   * One attempt: generate, store the result asset under the id fixed at creation (so a repeated
   * attempt or a racing worker never makes a second one), and, with the success, point the
   * target model configuration's preview at it. An attempt that finds the asset already stored
   * (its predecessor died after storing it) only completes the job.
   */
  private async execute(job: ClaimedJob, context: JobContext): Promise<JobOutcome> {
    const row = job as ClaimedJob & Record<string, any>;
    const assetId = row.result_asset_id as string;
    const stored = await this.db('assets').where('asset_id', assetId).first('asset_id');
    if (!stored) {
      const source = await this.db('assets')
        .where('asset_id', row.source_asset_id)
        .whereIn('organization_id', [row.organization_id, TEMPLATE_ORGANIZATION.organization_id])
        .first();
      if (!source) throw withFailureReason(new Error(`source asset ${row.source_asset_id} no longer exists`), 'source_missing');
      const generator = this.registry.create<IdleVideoGenerator>(IDLE_VIDEO_GENERATOR_KIND, row.generator);
      // Checked when the job was created; a job queued before the limit existed fails here.
      const tooLarge = imageTooLarge(Number(source.size_bytes));
      if (tooLarge) throw withFailureReason(new Error(`source asset ${row.source_asset_id}: ${tooLarge}`), 'other');
      const sourceImage = await this.storage.getObject(source.storage_key).catch(failedAs('storage_failed'));
      const video = await generator
        .generate({
          sourceImage,
          sourceContentType: source.content_type,
          referenceTemplate: row.reference_template,
          modelVariantId: row.model_variant_id,
          signal: context.signal,
        })
        .catch(failedAs('generator_failed'));
      if (context.signal.aborted) throw context.signal.reason;
      // Another worker reclaimed the job while this one generated: leave the asset to it.
      if (!(await context.stillHeld())) throw new Error('lease lost before storing the result');
      await this.assets
        .createFromBytes(row.organization_id, row.created_by, { asset_id: assetId, name: video.name, category: 'video', content_type: video.contentType, data: video.data })
        .catch(failedAs('storage_failed'));
    }
    return {
      result: { asset_id: assetId },
      alsoWrite: async (trx) => {
        if (!row.target_model_config_id) return;
        await trx('model_configs')
          .where({ model_config_id: row.target_model_config_id, organization_id: row.organization_id })
          .update({
            model_configurations: trx.raw(`jsonb_set(model_configurations, '{preview}', ?::jsonb)`, [JSON.stringify(assetId)]),
            updated_at: trx.fn.now(),
          });
      },
    };
  }
}
