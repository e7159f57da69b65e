/**
 * Connections of knex's pool kept out for hot prepared statements (`preparedQuery`), on
 * PostgreSQL. Acquiring from knex's pool (tarn) for every statement cost a timer, an asynchronous
 * validation and about 15 promises per query, about as much CPU as the rest of a REST GET's
 * database work; a held connection is taken from an array.
 *
 * The connections are knex's own (same settings: statement and lock timeouts), so the database
 * sees no more connections than the pool's size. At most half of the pool is held: other queries
 * (transactions, writes) always have the other half. When every held connection is busy, a
 * statement takes the ordinary path (acquired and released through knex: its timeout, its
 * errors). A held connection unused for a whole `idleReleaseMs` period goes back to the pool;
 * all go back as soon as knex's pool is destroyed (`db.destroy()` waits for them), and one that
 * failed or was closed (knex marks it disposed) goes back at once, for knex to replace.
 */
import type { Db } from './connect.ts';

export const HELD_CONNECTIONS = {
  /** Share of knex's pool that may be held (rounded down, at least 1 when the pool has 2 or more). */
  maxShare: 0.5,
  /** A held connection left unused through a whole period of this length is returned to the pool. */
  idleReleaseMs: 1_000,
} as const;

export interface PgConnection {
  query(config: { name: string; text: string; values: unknown[] }): Promise<{ rows: any[] }>;
  __knex__disposed?: unknown;
}

interface KnexPgClient {
  config: { client: unknown };
  pool?: TarnPool;
  acquireConnection(): Promise<PgConnection>;
  releaseConnection(connection: PgConnection): Promise<void>;
}

interface TarnPool {
  readonly max: number;
  on(event: 'poolDestroyRequest', listener: () => void): void;
}

export interface Held {
  readonly connection: PgConnection;
  /** Used since the last idle check. */
  used: boolean;
}

export class HeldConnections {
  private readonly free: Held[] = [];
  /** Taken from knex's pool (free, busy, or being acquired). */
  private count = 0;
  private readonly max: number;
  private destroyed = false;
  private timer: NodeJS.Timeout | undefined;

  private constructor(private readonly client: KnexPgClient, pool: TarnPool) {
    this.max = pool.max >= 2 ? Math.max(1, Math.floor(pool.max * HELD_CONNECTIONS.maxShare)) : 0;
    pool.on('poolDestroyRequest', () => this.destroy());
  }

  private static readonly byPool = new WeakMap<TarnPool, HeldConnections>();

  /** The held connections of `db`'s current pool; undefined when it has none (PGlite, a pool of one, destroyed). */
  static of(db: Db): HeldConnections | undefined {
    const client = db.client as unknown as KnexPgClient;
    const pool = client.pool;
    if (!pool || client.config.client !== 'pg') return undefined;
    let held = HeldConnections.byPool.get(pool);
    if (!held) HeldConnections.byPool.set(pool, (held = new HeldConnections(client, pool)));
    return held.max > 0 && !held.destroyed ? held : undefined;
  }

  /**
   * A free held connection, else a new one from knex's pool if fewer than the maximum are held
   * (a promise), else undefined: the caller takes the ordinary path.
   */
  take(): Held | Promise<Held> | undefined {
    for (let held = this.free.pop(); held !== undefined; held = this.free.pop()) {
      if (held.connection.__knex__disposed === undefined) {
        held.used = true;
        return held;
      }
      this.giveBack(held);
    }
    if (this.count >= this.max) return undefined;
    this.count++;
    return this.client.acquireConnection().then(
      (connection) => {
        this.startTimer();
        return { connection, used: true };
      },
      (err: unknown) => {
        this.count--;
        throw err;
      },
    );
  }

  /** After a statement: kept for the next one, or returned (failed, disposed, pool destroyed). */
  put(held: Held, failed: boolean): void {
    if (failed || this.destroyed || held.connection.__knex__disposed !== undefined) this.giveBack(held);
    else this.free.push(held);
  }

  private giveBack(held: Held): void {
    this.count--;
    void this.client.releaseConnection(held.connection);
  }

  private startTimer(): void {
    if (this.timer) return;
    this.timer = setInterval(() => this.releaseIdle(), HELD_CONNECTIONS.idleReleaseMs);
    this.timer.unref();
  }

  private releaseIdle(): void {
    const kept: Held[] = [];
    for (const held of this.free) {
      if (held.used) {
        held.used = false;
        kept.push(held);
      } else this.giveBack(held);
    }
    this.free.length = 0;
    this.free.push(...kept);
    if (this.count === 0) this.stopTimer();
  }

  private stopTimer(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  private destroy(): void {
    this.destroyed = true;
    this.stopTimer();
    for (const held of this.free.splice(0)) this.giveBack(held);
  }
}
