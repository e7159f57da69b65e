import type { Knex } from 'knex';

/**
 * Live sessions for the Session API (docs/sessions.md): each `agent_sessions` row is one admitted
 * session holding a concurrency slot while its lease is live. `runner_id` names the server
 * process that runs its bot and renews the lease by heartbeat; `release_requested_at` carries a
 * release to whichever process holds the session.
 */
export async function up(db: Knex): Promise<void> {
  await db.schema.alterTable('agent_sessions', (t) => {
    t.uuid('call_id');
    t.text('status').notNullable().defaultTo('starting');
    t.text('runner_id');
    t.text('room_provider');
    t.text('origin');
    t.timestamp('release_requested_at', { useTz: true });
    t.index(['runner_id']);
    t.index(['lease_expires_at']);
  });
}

export async function down(db: Knex): Promise<void> {
  await db.schema.alterTable('agent_sessions', (t) => {
    t.dropIndex(['runner_id']);
    t.dropIndex(['lease_expires_at']);
    t.dropColumns('call_id', 'status', 'runner_id', 'room_provider', 'origin', 'release_requested_at');
  });
}
