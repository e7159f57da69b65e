import type { Knex } from 'knex';

/**
 * The fleet's runner registry (docs/deployment.md): one row per runner process (`npm run runner`)
 * that runs bots and hosts their rooms. A runner inserts its row at start (`starting`), says
 * `ready` once its engines are warm, `draining` from SIGTERM on, and deletes it when it exits
 * cleanly; it renews `heartbeat_at` every few seconds. API processes place a session on a `ready`
 * runner whose heartbeat is fresh and whose placed sessions (`agent_sessions.runner_id`, live
 * lease) are fewer than its `slots`, locking the runner's row in the admission transaction.
 * `live_sessions` and `load` are what the runner last reported (operators, `svc runners list`);
 * placement counts the sessions themselves.
 */
export async function up(db: Knex): Promise<void> {
  await db.schema.createTable('session_runners', (t) => {
    t.text('runner_id').primary();
    /** Where API processes reach it (start requests) and where visitors' room_url points (`SVC_RUNNER_PUBLIC_URL`). */
    t.text('url').notNullable();
    t.integer('slots').notNullable();
    t.integer('live_sessions').notNullable().defaultTo(0);
    /** `{cpu_share, late_frame_share, event_loop_lag_ms}` as last reported. */
    t.jsonb('load').notNullable().defaultTo('{}');
    t.text('state').notNullable().defaultTo('starting');
    t.timestamp('started_at', { useTz: true }).notNullable().defaultTo(db.fn.now());
    t.timestamp('heartbeat_at', { useTz: true }).notNullable().defaultTo(db.fn.now());
  });
  await db.raw(`ALTER TABLE session_runners ADD CONSTRAINT session_runners_state CHECK (state IN ('starting', 'ready', 'draining'))`);
  await db.raw(`ALTER TABLE session_runners ADD CONSTRAINT session_runners_slots CHECK (slots >= 0)`);
}

export async function down(db: Knex): Promise<void> {
  await db.schema.dropTableIfExists('session_runners');
}
