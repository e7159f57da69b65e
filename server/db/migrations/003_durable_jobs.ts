import type { Knex } from 'knex';

/**
 * Durable generation jobs (docs/jobs.md): `generation_jobs` becomes the queue itself. A worker
 * claims a due `queued` row (`run_after <= now()`), sets it `running` with its `runner_id` and a
 * lease it renews by heartbeat; a lapsed lease means the worker died and the job is retried
 * (`attempts` < `max_attempts`) or failed. `result_asset_id` is fixed at creation so that the
 * result asset is created at most once whichever worker (or how many racing ones) finishes it.
 */
export async function up(db: Knex): Promise<void> {
  await db.schema.alterTable('generation_jobs', (t) => {
    t.integer('attempts').notNullable().defaultTo(0);
    t.integer('max_attempts').notNullable().defaultTo(3);
    t.timestamp('run_after', { useTz: true }).notNullable().defaultTo(db.fn.now());
    t.text('runner_id');
    t.timestamp('lease_expires_at', { useTz: true });
    t.text('last_error');
    t.uuid('result_asset_id').notNullable().defaultTo(db.raw('gen_random_uuid()'));
  });
  // Claims look for due queued jobs; the reaper for running ones with a lapsed lease.
  await db.raw(`CREATE INDEX generation_jobs_due ON generation_jobs (run_after) WHERE status = 'queued'`);
  await db.raw(`CREATE INDEX generation_jobs_running ON generation_jobs (organization_id, lease_expires_at) WHERE status = 'running'`);
}

export async function down(db: Knex): Promise<void> {
  await db.raw('DROP INDEX IF EXISTS generation_jobs_due');
  await db.raw('DROP INDEX IF EXISTS generation_jobs_running');
  await db.schema.alterTable('generation_jobs', (t) => {
    t.dropColumns('attempts', 'max_attempts', 'run_after', 'runner_id', 'lease_expires_at', 'last_error', 'result_asset_id');
  });
}
