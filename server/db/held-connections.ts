/**
 * Connections of knex's pool kept out for hot prepared statements (`preparedQuery`), on
 * PostgreSQL. Acquiring from knex's pool (tarn) for every statement cost a timer, an asynchronous
 * validation and about 15 promises per query, about as much CPU as the rest of a REST GET's
 * database work; a held connection is taken from an array.
 *
 * The connections are knex's own (same settings: statement and lock timeouts), so the database
 * sees no more connections than the pool's size. At most half of the pool is held: other queries
 * (transactions, writes) always have the other half. When every held connection is busy, a
 * statement waits in a first-come-first-served queue for the next one to come free (one timer for
 * the whole queue, not one per statement), at most knex's `acquireConnectionTimeout`: past it the
 * statement fails with knex's own `KnexTimeoutError` (answered 503 as a full pool is). When the
 * queue already holds `fallbackQueueLength` statements, a statement takes the ordinary path
 * instead (acquired and released through knex). A held connection unused for a whole
 * `idleReleaseMs` period goes back to the pool; all go back as soon as knex's pool is destroyed
 * (`db.destroy()` waits for them; queued statements are rejected as knex rejects an acquire
 * after destroy), and one that failed or was closed (knex marks it disposed) goes back at once,
 * for knex to replace (a new one is taken for the queue's first statement).
 */
import knexFactory from 'knex';
import type { Db } from './connect.ts';

export const HELD_CONNECTIONS = {
  /** Share of knex's pool that may be held (rounded down, at least 1 when the pool has 2 or more). */
  maxShare: 0.5,
  /** A held connection left unused through a whole period of this length is returned to the pool. */
  idleReleaseMs: 1_000,
  /**
   * Statements waiting for a held connection beyond which the next one goes through knex's pool.
   * Infinity: never. Measured (bench/_api-held.ts: 50 statements in flight, pool of 20, variants
   * alternated), the queue alone cost 112-114 µs of CPU per statement against 133-144 with a
   * fallback past 4 or 16 waiters, and served as many statements or more (docs/api.md, issue 24).
   */
  fallbackQueueLength: Infinity,
} as const;

/** knex's message for a pool acquire past `acquireConnectionTimeout` (knex/lib/client.js). */
export const ACQUIRE_TIMEOUT_MESSAGE = 'Knex: Timeout acquiring a connection. The pool is probably full. Are you missing a .transacting(trx) call?';

const { KnexTimeoutError } = knexFactory as unknown as { KnexTimeoutError: new (message: string) => Error };

export interface PgConnection {
  query(config: { name: string; text: string; values: unknown[] }): Promise<{ rows: any[] }>;
  __knex__disposed?: unknown;
}

/** What knex's pg client offers that the held connections and `preparedQuery` use. */
export interface KnexPgClient {
  config: { client: unknown; acquireConnectionTimeout?: number };
  pool?: TarnPool;
  logger?: { warn?(message: string): void };
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

interface Waiter {
  resolve(held: Held): void;
  reject(err: unknown): void;
  /** Date.now() past which it fails. */
  deadline: number;
}

export class HeldConnections {
  private readonly free: Held[] = [];
  /** Taken from knex's pool (free, busy, or being acquired). */
  private count = 0;
  private readonly max: number;
  private readonly acquireTimeoutMs: number;
  private destroyed = false;
  private timer: NodeJS.Timeout | undefined;
  /** Statements waiting for a held connection, first at `head`. */
  private readonly waiters: Waiter[] = [];
  private head = 0;
  private waitTimer: NodeJS.Timeout | undefined;

  private constructor(private readonly client: KnexPgClient, pool: TarnPool) {
    this.max = pool.max >= 2 ? Math.max(1, Math.floor(pool.max * HELD_CONNECTIONS.maxShare)) : 0;
    this.acquireTimeoutMs = client.config.acquireConnectionTimeout ?? 60_000;
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

  /** Statements waiting for a held connection. */
  get queued(): number {
    return this.waiters.length - this.head;
  }

  /**
   * A free held connection; else a new one from knex's pool if fewer than the maximum are held
   * (a promise); else the next one to come free (a promise, first come first served); or
   * undefined when `fallbackQueueLength` statements are already waiting: the caller takes the
   * ordinary path.
   */
  take(): Held | Promise<Held> | undefined {
    for (let held = this.free.pop(); held !== undefined; held = this.free.pop()) {
      if (held.connection.__knex__disposed === undefined) {
        held.used = true;
        return held;
      }
      this.giveBack(held);
    }
    if (this.count < this.max) return this.acquire();
    if (this.queued >= HELD_CONNECTIONS.fallbackQueueLength) return undefined;
    return new Promise<Held>((resolve, reject) => {
      this.waiters.push({ resolve, reject, deadline: Date.now() + this.acquireTimeoutMs });
      if (!this.waitTimer) this.waitTimer = setTimeout(this.expireWaiters, this.acquireTimeoutMs);
    });
  }

  /** After a statement: to the first waiting statement, kept for the next one, or returned (failed, disposed, pool destroyed). */
  put(held: Held, failed: boolean): void {
    if (failed || this.destroyed || held.connection.__knex__disposed !== undefined) {
      this.giveBack(held);
      // A replacement for the statements waiting, as the first of them would have taken.
      if (this.queued > 0 && !this.destroyed) this.acquire().then(this.handOut, this.failFirst);
      return;
    }
    this.handOut(held);
  }

  private acquire(): Promise<Held> {
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

  private readonly handOut = (held: Held): void => {
    const waiter = this.next();
    if (waiter) {
      held.used = true;
      waiter.resolve(held);
    } else if (this.destroyed) this.giveBack(held);
    else this.free.push(held);
  };

  private readonly failFirst = (err: unknown): void => {
    this.next()?.reject(err);
  };

  private next(): Waiter | undefined {
    if (this.head === this.waiters.length) return undefined;
    const waiter = this.waiters[this.head]!;
    this.waiters[this.head++] = undefined as never;
    if (this.head === this.waiters.length) {
      this.waiters.length = 0;
      this.head = 0;
    } else if (this.head >= 1024) {
      this.waiters.splice(0, this.head);
      this.head = 0;
    }
    return waiter;
  }

  /** Fails the waiters past their deadline (the first ones: all share one timeout); rearmed for the next. */
  private readonly expireWaiters = (): void => {
    this.waitTimer = undefined;
    const now = Date.now();
    while (this.queued > 0 && this.waiters[this.head]!.deadline <= now) {
      this.client.logger?.warn?.(`Acquire connection error: held connection not free within ${this.acquireTimeoutMs} ms`);
      this.next()!.reject(new KnexTimeoutError(ACQUIRE_TIMEOUT_MESSAGE));
    }
    if (this.queued > 0) this.waitTimer = setTimeout(this.expireWaiters, this.waiters[this.head]!.deadline - now);
  };

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
    clearTimeout(this.waitTimer);
    this.waitTimer = undefined;
    for (let waiter = this.next(); waiter; waiter = this.next()) waiter.reject(new Error('Unable to acquire a connection'));
    for (const held of this.free.splice(0)) this.giveBack(held);
  }
}
