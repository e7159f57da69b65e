import type { Knex } from 'knex';
import * as initial from './migrations/001_initial.ts';
import * as liveSessions from './migrations/002_live_sessions.ts';
import * as durableJobs from './migrations/003_durable_jobs.ts';
import * as sessionRunners from './migrations/004_session_runners.ts';
import * as admissionBatch from './migrations/005_admission_batch.ts';
import * as jobBacklog from './migrations/006_job_backlog.ts';
import * as jobRetention from './migrations/007_job_retention.ts';
import * as finalizeClaims from './migrations/008_finalize_claims.ts';

interface Migration {
  up(db: Knex): Promise<void>;
  down(db: Knex): Promise<void>;
}

/** Migrations in order; knex runs them from this list (no directory scanning, works under tsx). */
const MIGRATIONS: Record<string, Migration> = {
  '001_initial': initial,
  '002_live_sessions': liveSessions,
  '003_durable_jobs': durableJobs,
  '004_session_runners': sessionRunners,
  '005_admission_batch': admissionBatch,
  '006_job_backlog': jobBacklog,
  '007_job_retention': jobRetention,
  '008_finalize_claims': finalizeClaims,
};

const source: Knex.MigrationSource<string> = {
  getMigrations: async () => Object.keys(MIGRATIONS),
  getMigrationName: (name) => name,
  getMigration: async (name) => MIGRATIONS[name]!,
};

export async function migrateToLatest(db: Knex): Promise<void> {
  await db.migrate.latest({ migrationSource: source, tableName: 'knex_migrations' });
}

/** Migrations this code knows that the database has not applied (readiness: server/health). */
export async function pendingMigrations(db: Knex): Promise<string[]> {
  const applied = new Set((await db('knex_migrations').select('name')).map((r: { name: string }) => r.name));
  return Object.keys(MIGRATIONS).filter((name) => !applied.has(name));
}
