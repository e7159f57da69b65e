import { existsSync } from 'node:fs';
import knexFactory, { type Knex } from 'knex';
import type pg from 'pg';
import type { Socket } from 'node:net';
import type { Logger } from 'pino';
import ClientPgLite from 'knex-pglite';
import { SERVER_DEFAULTS, type DatabaseTimeouts } from '../config/server-config.ts';
import { PgliteLock } from './pglite-lock.ts';
import { makePrivate } from '../security/private-files.ts';
import { PGLITE_SOCKET_RULES, pgliteSocketDir, pgliteSocketPath } from './pglite-socket.ts';

export type Db = Knex;

export interface DatabaseOptions {
  /** PostgreSQL URL; absent means the embedded PGlite database in `pgliteDir`. */
  databaseUrl?: string;
  pgliteDir: string;
  /** Connection pool size on PostgreSQL (PGlite is always one connection). */
  poolMax?: number;
  /** PostgreSQL time limits; defaults `SERVER_DEFAULTS.database` (config.ts). PGlite ignores them. */
  timeouts?: Partial<DatabaseTimeouts>;
  /** Where knex's own warnings go (failed connection attempts during an outage); console by default. */
  logger?: Pick<Logger, 'warn' | 'error' | 'debug'>;
}

export const DATABASE_DEFAULTS = {
  /** Enough for 50 concurrent API requests without queueing on a 2-core machine. */
  poolMax: 20,
  /**
   * Connections kept open when idle (PostgreSQL), opened at start by `warmPool`. A burst of
   * connects uses several at once (the agent lookup, the admission transaction, the bot starts'
   * reads): opened on demand, each new one cost the first burst a connection set-up and a cold
   * database backend (issue 25, quiet runs of bench/_admission-burst.ts: the first burst's p99
   * in the 200 ms bucket in 4 of 4 with none kept, in the 75-100 ms buckets in 2 of 4 with 4 kept
   * and in 3 of 4 with 10; docs/operations.md). Small, so that a fleet of processes and the test
   * suite's many servers stay far below PostgreSQL's default 100 connections.
   */
  poolMin: 4,
  ...SERVER_DEFAULTS.database,
} as const;

/**
 * Opens PostgreSQL when a URL is given, otherwise PGlite (same SQL dialect, same migrations).
 * A PGlite directory is locked to this process until `closeDatabase(db)`.
 */
export function openDatabase(options: DatabaseOptions): Db {
  if (options.databaseUrl) {
    const t = { ...DATABASE_DEFAULTS, ...options.timeouts };
    return knexFactory({
      client: 'pg',
      // Set per connection by node-postgres at connect time: every statement of every request is
      // bounded, so a stalled or contended database answers 503 instead of piling requests up.
      connection: {
        connectionString: options.databaseUrl,
        statement_timeout: t.statementTimeoutMs,
        lock_timeout: t.lockTimeoutMs,
        connectionTimeoutMillis: t.connectTimeoutMs,
      } as Knex.PgConnectionConfig,
      acquireConnectionTimeout: t.acquireTimeoutMs,
      ...(options.logger ? { log: knexLog(options.logger) } : {}),
      pool: {
        min: Math.min(DATABASE_DEFAULTS.poolMin, options.poolMax ?? DATABASE_DEFAULTS.poolMax),
        max: options.poolMax ?? DATABASE_DEFAULTS.poolMax,
        afterCreate: (connection: pg.Client, done: (err: Error | null, connection: pg.Client) => void) => {
          // A statement timeout of 0 is PostgreSQL's "no limit": no bound to guard beyond either.
          if (t.statementTimeoutMs > 0) guardStalls(connection, t.statementTimeoutMs + t.stallMarginMs);
          done(null, connection);
        },
      },
    });
  }
  const pgliteDir = options.pgliteDir;
  makePrivate(pgliteDir, { recursive: false });
  const lock = new PgliteLock(pgliteDir);
  lock.acquire();
  const db = knexFactory({
    client: PrivatePgLite as unknown as typeof Knex.Client,
    dialect: 'postgres',
    connection: { filename: pgliteDir },
    acquireConnectionTimeout: PGLITE_ACQUIRE_TIMEOUT_MS,
  } as Knex.Config);
  pgliteLocks.set(db, lock);
  return db;
}

const pgliteLocks = new WeakMap<Db, PgliteLock>();

/** The message of a stalled connection's error (a 503, `isDatabaseUnavailable`). */
const STALLED = 'database connection stalled';

/**
 * Destroys `connection` when a query on it gets no byte back for `ms` (its socket idle while a
 * query is out): the database host gone without closing the connection, or a partition. pg's own
 * `query_timeout` leaves the query on the connection, which knex would hand out again; a destroyed
 * one is an error (the query rejects, 503) and knex drops it from the pool. An idle connection, or
 * one held in a transaction between queries, is left alone.
 */
function guardStalls(connection: pg.Client, ms: number): void {
  const internals = connection as unknown as { connection?: { stream?: Socket }; _getActiveQuery?: () => unknown; _queryQueue?: unknown[] };
  const socket = internals.connection?.stream;
  if (!socket || typeof socket.setTimeout !== 'function') return;
  socket.setTimeout(ms);
  socket.on('timeout', () => {
    if (internals._getActiveQuery?.() || internals._queryQueue?.length) socket.destroy(new Error(`${STALLED}: no answer within ${ms} ms`));
  });
}

/**
 * Opens the pool's kept connections (`DATABASE_DEFAULTS.poolMin`) now, each with a first query run
 * on it, instead of on the first requests that need them. knex's pool (tarn) keeps that many
 * once they exist but never opens them by itself. No-op on PGlite (one connection, opened by the
 * migrations).
 */
export async function warmPool(db: Db): Promise<number> {
  const client = db.client as { config: Knex.Config; acquireConnection(): Promise<unknown>; releaseConnection(connection: unknown): Promise<unknown> };
  const min = (client.config.pool as { min?: number } | undefined)?.min ?? 0;
  if (pgliteLocks.has(db) || min <= 0) return 0;
  const connections: unknown[] = [];
  try {
    for (let i = 0; i < min; i++) connections.push(await client.acquireConnection());
    await Promise.all(connections.map((c) => (c as { query(sql: string): Promise<unknown> }).query('select 1')));
  } finally {
    await Promise.all(connections.map((c) => client.releaseConnection(c)));
  }
  return connections.length;
}

/**
 * PGlite writes its files 0666 whatever the umask (a fresh database is unpacked when its one
 * connection opens; the relation cache files are rewritten at every start): they are made private
 * once it is up. Its folder is 0700 from the start, so other users cannot reach them meanwhile.
 */
const PglitePool = ClientPgLite as unknown as new (config: Knex.Config) => { config: Knex.Config; _acquireOnlyConnection(): Promise<unknown> };
class PrivatePgLite extends PglitePool {
  override async _acquireOnlyConnection(): Promise<unknown> {
    const connection = await super._acquireOnlyConnection();
    makePrivate((this.config.connection as { filename: string }).filename, { recursive: true });
    return connection;
  }
}

/**
 * PGlite's one connection is made by the first query: on a new folder that runs initdb in
 * WebAssembly, which took over knex's default 60 s on a loaded 2-core machine (two servers
 * starting in one process) and failed the start. Later waits are for the one session only.
 */
const PGLITE_ACQUIRE_TIMEOUT_MS = 180_000;

export const EMBEDDED_CLIENT_RULES = {
  /**
   * A server takes the directory lock a moment before its socket listens (it opens and migrates
   * the database first): a client finding the lock held but no socket yet waits this long for it.
   */
  socketWaitMs: 3_000,
  pollMs: 50,
} as const;

export interface EmbeddedClient {
  db: Db;
  /** `server`: through the socket of the server holding the directory; `directory`: opened here, locked. */
  via: 'server' | 'directory';
  /** The socket used when `via` is `server`. */
  socketPath: string;
}

/**
 * The embedded database for a process that is not the server (the CLI): through the running
 * server's socket when a server holds the directory (pglite-socket.ts), otherwise the
 * directory itself, locked to this process until `closeDatabase(db)` like the server does. A socket
 * left by a server that was killed answers nothing and is passed over (its stale lock is then
 * taken over by PgliteLock). `npm run worker` does not come here: it requires DATABASE_URL, since
 * on the embedded database `npm start` runs the jobs itself (server/worker.ts, docs/jobs.md).
 */
export async function openEmbeddedClient(pgliteDir: string): Promise<EmbeddedClient> {
  const socketPath = pgliteSocketPath(pgliteDir);
  const deadline = Date.now() + EMBEDDED_CLIENT_RULES.socketWaitMs;
  for (;;) {
    if (existsSync(socketPath)) {
      const db = knexFactory({
        client: 'pg',
        connection: { host: pgliteSocketDir(pgliteDir), port: PGLITE_SOCKET_RULES.port, user: 'svc', database: 'svc' },
        pool: { min: 0, max: 1 },
        // A refused probe (a killed server's socket) is expected: not worth knex's console warning.
        log: { warn: () => undefined, error: () => undefined, deprecate: () => undefined, debug: () => undefined },
      });
      try {
        await db.raw('select 1');
        return { db, via: 'server', socketPath };
      } catch (err) {
        await db.destroy();
        const code = (err as NodeJS.ErrnoException).code;
        if (code !== 'ECONNREFUSED' && code !== 'ENOENT') throw new Error(`the server sharing the embedded database did not answer on ${socketPath}: ${(err as Error).message}`);
      }
    }
    try {
      return { db: openDatabase({ pgliteDir }), via: 'directory', socketPath };
    } catch (err) {
      if (!/in use by process/.test((err as Error).message)) throw err;
      if (Date.now() >= deadline) {
        throw new Error(
          `${(err as Error).message.replace(/; stop it first.*$/, '')}, which does not share it (no server listening on ${socketPath}: ` +
            `a server still starting, of an older version, or embedded in another program). Try again once the server is listening; ` +
            `otherwise stop that process, or use DATABASE_URL (PostgreSQL) for both`,
        );
      }
      await new Promise((r) => setTimeout(r, EMBEDDED_CLIENT_RULES.pollMs));
    }
  }
}

function knexLog(logger: Pick<Logger, 'warn' | 'error' | 'debug'>): Knex.Logger {
  const text = (m: unknown) => (m instanceof Error ? m.message : typeof m === 'string' ? m : JSON.stringify(m));
  return {
    warn: (m) => logger.warn({ source: 'knex' }, text(m)),
    error: (m) => logger.error({ source: 'knex' }, text(m)),
    deprecate: (method, alternative) => logger.debug({ source: 'knex' }, `${method} is deprecated, use ${alternative}`),
    debug: (m) => logger.debug({ source: 'knex' }, text(m)),
  };
}

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

/** PostgreSQL SQLSTATEs of a database that is down, overloaded or contended: retry later (503). */
const UNAVAILABLE_SQLSTATES = new Set([
  '57014', // query_canceled: statement_timeout
  '55P03', // lock_not_available: lock_timeout
  '40P01', // deadlock_detected
  '53300', // too_many_connections
  '53000', '53100', '53200', // insufficient resources, disk full, out of memory
  '57P01', '57P02', '57P03', // admin / crash shutdown, cannot connect now (starting up, recovery)
]);
const UNAVAILABLE_ERRNOS = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'EPIPE']);

/**
 * Whether an error means "the database cannot serve this now" (down, unreachable, pool
 * exhausted, statement or lock timeout) rather than a bug: such requests are answered 503
 * `service_unavailable` with `Retry-After`. The pool recovers by itself: broken connections are
 * discarded and new ones opened once the database answers again.
 */
export function isDatabaseUnavailable(err: unknown): boolean {
  if (!err || typeof err !== 'object') return false;
  const e = err as { name?: string; code?: unknown; message?: unknown };
  if (e.name === 'KnexTimeoutError') return true; // no pool connection within acquireConnectionTimeout
  const code = typeof e.code === 'string' ? e.code : '';
  if (UNAVAILABLE_SQLSTATES.has(code) || code.startsWith('08')) return true; // class 08: connection exception
  if (UNAVAILABLE_ERRNOS.has(code)) return true;
  const message = typeof e.message === 'string' ? e.message : '';
  return /Connection terminated|database connection stalled|Unable to acquire a connection|connection timeout|Client has encountered a connection error|the database system is (starting up|shutting down)/i.test(message);
}
