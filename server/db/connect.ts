import { mkdirSync } from 'node:fs';
import knexFactory, { type Knex } from 'knex';
import ClientPgLite from 'knex-pglite';
import { PgliteLock } from './pglite-lock.ts';

export type Db = Knex;

export interface DatabaseOptions {
  /** PostgreSQL URL; absent means the embedded PGlite database in `pgliteDir`. */
  databaseUrl?: string;
  pgliteDir: string;
  /** Connection pool size on PostgreSQL (PGlite is always one connection). */
  poolMax?: number;
}

export const DATABASE_DEFAULTS = {
  /** Enough for 50 concurrent API requests without queueing on a 2-core machine. */
  poolMax: 20,
} as const;

/**
 * Opens PostgreSQL when a URL is given, otherwise PGlite (same SQL dialect, same migrations).
 * A PGlite directory is locked to this process until `closeDatabase(db)`.
 */
export function openDatabase(options: DatabaseOptions): Db {
  if (options.databaseUrl) {
    return knexFactory({
      client: 'pg',
      connection: options.databaseUrl,
      pool: { min: 0, max: options.poolMax ?? DATABASE_DEFAULTS.poolMax },
    });
  }
  mkdirSync(options.pgliteDir, { recursive: true });
  const lock = new PgliteLock(options.pgliteDir);
  lock.acquire();
  const db = knexFactory({ client: ClientPgLite as unknown as typeof Knex.Client, dialect: 'postgres', connection: { filename: options.pgliteDir } } as Knex.Config);
  pgliteLocks.set(db, lock);
  return db;
}

const pgliteLocks = new WeakMap<Db, PgliteLock>();

/** Closes the pool and releases the PGlite directory lock. */
export async function closeDatabase(db: Db): Promise<void> {
  try {
    await db.destroy();
  } finally {
    pgliteLocks.get(db)?.release();
  }
}

/** `count()` is a string on pg (bigint) and a number on PGlite; callers always get a number. */
export function countOf(row: Record<string, unknown> | undefined): number {
  if (!row) return 0;
  const value = Object.values(row)[0];
  return typeof value === 'number' ? value : Number(value ?? 0);
}

/** Rows touched by a delete: a number on pg, a result object (`rowCount`) from knex-pglite. */
export function affectedRows(result: unknown): number {
  if (typeof result === 'number') return result;
  return Number((result as { rowCount?: number; affectedRows?: number })?.rowCount ?? (result as { affectedRows?: number })?.affectedRows ?? 0);
}

export function isUniqueViolation(err: unknown): boolean {
  return (err as { code?: string })?.code === '23505';
}
