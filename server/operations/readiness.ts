/**
 * Readiness (`GET /readyz`): may this process be given new work? Five checks, each `ok` or a
 * short reason (never an internal error text; the cause is logged):
 *
 * - `shutdown`: `ok`, or `draining` once SIGTERM arrived (first, before anything stops);
 * - `database`: one `SELECT name FROM knex_migrations` answered within `databaseTimeoutMs`;
 * - `migrations`: every migration this code knows is recorded in that table;
 * - `face_engine`: the default face model opened once (decoder, landmarks, rig): `loading`
 *   until then, `failed` if it could not;
 * - `engines`: the plugins' once-per-process warm-up (the offline engines' worker, WASM and phrase
 *   templates; the WebRTC library) that `npm start` runs after listening: `loading` until it
 *   settles, then `ok` (a warm-up that failed is logged and paid by the first use instead, so it
 *   does not keep the process unready). A first burst of visitors sent before it settled had its
 *   admission decisions wait behind it (issue 25: up to 217 ms, against 31 ms once warm).
 *
 * Concurrent checks share one database query (a scraper polling a down database does not pile
 * queries up); each caller still answers within the timeout.
 */
import type { Logger } from 'pino';
import type { Db } from '../db/connect.ts';
import { pendingMigrations } from '../db/migrate.ts';

export const READINESS = {
  /** A database check not answered within this time fails (`database: no answer within N ms`). */
  databaseTimeoutMs: 2000,
} as const;

export type CheckName = 'shutdown' | 'database' | 'migrations' | 'face_engine' | 'engines';

export interface ReadinessReport {
  readonly ready: boolean;
  /** Every check: `ok` or why not. */
  readonly checks: Readonly<Record<CheckName, string>>;
  /** The checks that are not `ok`, in the order above. */
  readonly failing: readonly CheckName[];
}

export interface ReadinessOptions {
  readonly db: Db;
  readonly logger?: Logger;
  readonly databaseTimeoutMs?: number;
}

export class Readiness {
  private draining = false;
  private faceEngine = 'not loaded';
  /** `ok` unless a warm-up is tracked (a server built without one has nothing to wait for). */
  private engines = 'ok';
  private query: Promise<string[]> | undefined;
  private lastDatabaseProblem: string | undefined;

  constructor(private readonly options: ReadinessOptions) {}

  /** Whether new sessions and face connections may start (false once draining). */
  get accepting(): boolean {
    return !this.draining;
  }

  /** SIGTERM: unready from now on (and for good). */
  drain(): void {
    this.draining = true;
  }

  /** The face engine's warm-up: `loading` until it settles, then `ok` or `failed`. */
  trackFaceEngine(warmUp: Promise<unknown>): void {
    this.faceEngine = 'loading';
    warmUp.then(
      () => (this.faceEngine = 'ok'),
      (err: unknown) => {
        this.faceEngine = 'failed';
        this.options.logger?.error({ err }, 'the face engine could not load: /readyz stays unready');
      },
    );
  }

  /** The plugins' warm-up: `loading` until it settles, then `ok` whatever its outcome (the caller logs failures). */
  trackEngines(warmUp: Promise<unknown>): void {
    this.engines = 'loading';
    const settled = () => (this.engines = 'ok');
    warmUp.then(settled, settled);
  }

  async check(): Promise<ReadinessReport> {
    const checks: Record<CheckName, string> = { shutdown: this.draining ? 'draining' : 'ok', database: 'ok', migrations: 'ok', face_engine: this.faceEngine, engines: this.engines };
    const timeoutMs = this.options.databaseTimeoutMs ?? READINESS.databaseTimeoutMs;
    this.query ??= pendingMigrations(this.options.db).finally(() => (this.query = undefined));
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      this.query.then((pending) => ({ pending }), (err: unknown) => ({ err })),
      new Promise<{ timeout: true }>((resolve) => (timer = setTimeout(() => resolve({ timeout: true }), timeoutMs))),
    ]);
    clearTimeout(timer);
    if ('timeout' in outcome) {
      checks.database = `no answer within ${timeoutMs} ms`;
      checks.migrations = 'unknown';
    } else if ('err' in outcome) {
      checks.database = 'unreachable';
      checks.migrations = 'unknown';
      const text = outcome.err instanceof Error ? outcome.err.message : String(outcome.err);
      // Logged once per distinct problem, not on every probe.
      if (text !== this.lastDatabaseProblem) this.options.logger?.warn({ err: outcome.err }, 'readiness: database check failed');
      this.lastDatabaseProblem = text;
    } else {
      this.lastDatabaseProblem = undefined;
      if (outcome.pending.length) checks.migrations = `pending: ${outcome.pending.join(', ')}`;
    }
    const failing = (Object.keys(checks) as CheckName[]).filter((name) => checks[name] !== 'ok');
    return { ready: failing.length === 0, checks, failing };
  }
}
