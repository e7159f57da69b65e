import type { Knex } from 'knex';

/**
 * A finalize's claim on its upload session carries a token and the time it was taken
 * (server/services/assets.ts): a claim older than `FINALIZE_CLAIM_STALE_MS` (its finalize died, or
 * could not give it back with the database down) is taken over by the next finalize instead of
 * answering 409 `already_finalized` until the 24 h upload sweep; the token keeps the old holder,
 * if it was only slow, from releasing or recording what is no longer its claim.
 */
export async function up(db: Knex): Promise<void> {
  await db.schema.alterTable('upload_sessions', (t) => {
    t.text('claim_token');
    t.timestamp('claimed_at', { useTz: true });
  });
}

export async function down(db: Knex): Promise<void> {
  await db.schema.alterTable('upload_sessions', (t) => {
    t.dropColumn('claim_token');
    t.dropColumn('claimed_at');
  });
}
