import type { Knex } from 'knex';

/**
 * Finished generation jobs are deleted after `SVC_JOB_RETENTION_MS` (docs/jobs.md): the hourly
 * sweep finds the oldest of them by their last update through this partial index, never walking
 * the table.
 */
export async function up(db: Knex): Promise<void> {
  await db.raw(`CREATE INDEX generation_jobs_finished ON generation_jobs (updated_at) WHERE status IN ('succeeded', 'failed')`);
}

export async function down(db: Knex): Promise<void> {
  await db.raw('DROP INDEX IF EXISTS generation_jobs_finished');
}
