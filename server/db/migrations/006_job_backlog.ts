import type { Knex } from 'knex';

/**
 * An organization's waiting jobs, counted at every generate request against its bound
 * (`SVC_JOB_MAX_QUEUED`, docs/jobs.md) and skipped by claims while it runs its share: one index
 * on the queued rows by organization.
 */
export async function up(db: Knex): Promise<void> {
  await db.raw(`CREATE INDEX generation_jobs_queued_by_org ON generation_jobs (organization_id) WHERE status = 'queued'`);
}

export async function down(db: Knex): Promise<void> {
  await db.raw('DROP INDEX IF EXISTS generation_jobs_queued_by_org');
}
