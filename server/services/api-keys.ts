import { randomUUID } from 'node:crypto';
import type { Db } from '../db/connect.ts';
import { preparedQuery } from '../db/prepared-query.ts';
import type { Principal } from '../http/principal.ts';
import { apiKeyMatches, generateApiKey, hashApiKey } from '../security/api-key-token.ts';
import { Organizations } from './organizations.ts';

export const API_KEY_CACHE = {
  /**
   * A successful lookup is reused this long. Revocation through this process is immediate;
   * a revocation by another process (the CLI) takes effect within this time.
   */
  ttlMs: 1000,
  maxEntries: 10_000,
} as const;

export const API_KEY_REVOCATION = {
  /**
   * How often a `RevocationWatcher` asks the database whether its watched keys are still active.
   * A revocation through the same process (its `ApiKeys.revoke`) reaches watchers at once; one
   * made by another process (the `svc keys revoke` CLI, another server) within this interval
   * plus one query.
   */
  checkIntervalMs: 10_000,
} as const;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface ApiKeyRecord {
  api_key_id: string;
  organization: string;
  name: string;
  prefix: string;
  created_at: string;
  revoked_at: string | null;
}

/**
 * API keys: created for an organization (by name), shown once, stored as a SHA-256 hash with a
 * display prefix. Lookup is by hash; the final comparison is constant-time.
 */
export class ApiKeys {
  private readonly organizations: Organizations;
  /** key hash -> principal and expiry; only successful lookups are cached. */
  private readonly cache = new Map<string, { principal: Principal; expiresAtMs: number }>();
  /**
   * Lookups on their way, by key hash: when a cached entry expires under load, the requests that
   * arrive meanwhile wait for the one query instead of each sending their own (50 connections
   * sent 50 identical queries every `ttlMs`).
   */
  private readonly inFlight = new Map<string, Promise<Principal | null>>();
  /**
   * Bumped by every revocation. A lookup only fills the cache when no revocation happened while
   * it ran: otherwise a lookup that read the key just before the revocation committed would put
   * the revoked key back into the cache after the revocation cleared it.
   */
  private generation = 0;
  /** In-process revocation events (see `onRevoked`). */
  private readonly revokedListeners = new Set<(apiKeyId: string) => void>();

  constructor(private readonly db: Db) {
    this.organizations = new Organizations(db);
  }

  /** Creates a key; the plaintext `key` exists only in this return value. */
  async create(organizationName: string, label: string): Promise<ApiKeyRecord & { key: string; organization_id: string }> {
    const org = await this.organizations.findOrCreate(organizationName);
    const { key, prefix, hash } = generateApiKey();
    const api_key_id = randomUUID();
    const [row] = await this.db('api_keys')
      .insert({ api_key_id, organization_id: org.organization_id, name: label, prefix, key_hash: hash })
      .returning(['created_at']);
    return {
      api_key_id,
      organization: org.name,
      organization_id: org.organization_id,
      name: label,
      prefix,
      created_at: new Date(row.created_at).toISOString(),
      revoked_at: null,
      key,
    };
  }

  async list(organizationName: string): Promise<ApiKeyRecord[]> {
    const rows = await this.db('api_keys as k')
      .join('organizations as o', 'o.organization_id', 'k.organization_id')
      .where('o.name', organizationName)
      .orderBy('k.created_at', 'asc')
      .select('k.api_key_id', 'o.name as organization', 'k.name', 'k.prefix', 'k.created_at', 'k.revoked_at');
    return rows.map((r) => ({
      ...r,
      created_at: new Date(r.created_at).toISOString(),
      revoked_at: r.revoked_at ? new Date(r.revoked_at).toISOString() : null,
    }));
  }

  /** Revokes a key; returns false when no active key has that id. */
  async revoke(apiKeyId: string): Promise<boolean> {
    this.invalidate();
    try {
      const n = await this.db('api_keys').where({ api_key_id: apiKeyId }).whereNull('revoked_at').update({ revoked_at: this.db.fn.now() });
      if (n > 0) {
        for (const listener of [...this.revokedListeners]) {
          try {
            listener(apiKeyId);
          } catch {
            // A listener's failure must not turn a done revocation into an error.
          }
        }
      }
      return n > 0;
    } finally {
      // Lookups that started before the UPDATE committed may have read the key as active.
      this.invalidate();
    }
  }

  /**
   * Calls `listener(apiKeyId)` after every revocation made through this instance (this process).
   * Revocations by other processes are not seen here: `RevocationWatcher` adds a periodic check.
   * Returns the unsubscribe function.
   */
  onRevoked(listener: (apiKeyId: string) => void): () => void {
    this.revokedListeners.add(listener);
    return () => this.revokedListeners.delete(listener);
  }

  /** Whether the key exists and is not revoked (uncached: asks the database). */
  async isActive(apiKeyId: string): Promise<boolean> {
    if (!UUID.test(apiKeyId)) return false;
    const row = await this.db('api_keys').where({ api_key_id: apiKeyId }).whereNull('revoked_at').first('api_key_id');
    return Boolean(row);
  }

  /** Of `apiKeyIds`, those that are revoked or no longer exist (one query). */
  async inactiveAmong(apiKeyIds: readonly string[]): Promise<string[]> {
    const ids = [...new Set(apiKeyIds)].filter((id) => UUID.test(id));
    const invalid = apiKeyIds.filter((id) => !UUID.test(id));
    if (!ids.length) return invalid;
    const rows: { api_key_id: string }[] = await this.db('api_keys').whereIn('api_key_id', ids).whereNull('revoked_at').select('api_key_id');
    const active = new Set(rows.map((r) => r.api_key_id));
    return [...invalid, ...ids.filter((id) => !active.has(id))];
  }

  /** Forgets every cached lookup, including those still in flight. */
  invalidate(): void {
    this.generation++;
    this.cache.clear();
    this.inFlight.clear();
  }

  /** The cached principal of `key`, without waiting: undefined when it must be looked up. */
  cachedPrincipal(key: string): Principal | undefined {
    const hit = this.cache.get(hashApiKey(key));
    return hit && hit.expiresAtMs > Date.now() ? hit.principal : undefined;
  }

  /** `authenticate` with a short-lived cache of successful lookups (see API_KEY_CACHE). */
  async authenticateCached(key: string): Promise<Principal | null> {
    const hash = hashApiKey(key);
    const hit = this.cache.get(hash);
    const now = Date.now();
    if (hit && hit.expiresAtMs > now) return hit.principal;
    const pending = this.inFlight.get(hash);
    if (pending) return pending;
    const generation = this.generation;
    const lookup = this.authenticate(key)
      .then((principal) => {
        if (principal && generation === this.generation) {
          if (this.cache.size >= API_KEY_CACHE.maxEntries) this.cache.clear();
          this.cache.set(hash, { principal, expiresAtMs: now + API_KEY_CACHE.ttlMs });
        } else this.cache.delete(hash);
        return principal;
      })
      .finally(() => {
        if (this.inFlight.get(hash) === lookup) this.inFlight.delete(hash);
      });
    this.inFlight.set(hash, lookup);
    return lookup;
  }

  async authenticate(key: string): Promise<Principal | null> {
    const [row] = await preparedQuery(
      this.db,
      'api_keys.authenticate',
      'select api_key_id, organization_id, key_hash from api_keys where key_hash = ? and revoked_at is null',
      [hashApiKey(key)],
    );
    if (!row || !apiKeyMatches(key, row.key_hash)) return null;
    return { organizationId: row.organization_id, apiKeyId: row.api_key_id, createdBy: `api_key:${row.api_key_id}` };
  }
}

export interface RevocationWatcherOptions {
  /** Period of the database check (default API_KEY_REVOCATION.checkIntervalMs). */
  readonly intervalMs?: number;
  /** A failed periodic check (the database unreachable): reported, watched keys stay as they are. */
  readonly onError?: (error: unknown) => void;
}

/**
 * Ends long-lived things (a /realtime session, a bot) whose API key is revoked. `watch(keyId, fn)`
 * calls `fn` once, when the key is revoked: at once for a revocation made through the same
 * `ApiKeys` instance, otherwise at the next periodic check (one query for every watched key; the
 * timer runs only while something is watched, and is unref'd). The bound for another process's
 * revocation is `intervalMs` plus one query.
 */
export class RevocationWatcher {
  private readonly watchers = new Map<string, Set<() => void>>();
  private readonly intervalMs: number;
  private timer: NodeJS.Timeout | undefined;
  private unsubscribe: (() => void) | undefined;
  private checking = false;

  constructor(
    private readonly keys: Pick<ApiKeys, 'onRevoked' | 'inactiveAmong'>,
    private readonly options: RevocationWatcherOptions = {},
  ) {
    this.intervalMs = options.intervalMs ?? API_KEY_REVOCATION.checkIntervalMs;
    if (!(this.intervalMs > 0)) throw new RangeError(`revocation check interval must be positive, got ${this.intervalMs}`);
  }

  /** Number of watched keys (for metrics and tests). */
  get watchedKeys(): number {
    return this.watchers.size;
  }

  /** Calls `onRevoked` once when `apiKeyId` is revoked; returns the function that stops watching (idempotent). */
  watch(apiKeyId: string, onRevoked: () => void): () => void {
    let callbacks = this.watchers.get(apiKeyId);
    if (!callbacks) this.watchers.set(apiKeyId, (callbacks = new Set()));
    const entry = () => onRevoked();
    callbacks.add(entry);
    this.start();
    return () => this.remove(apiKeyId, entry);
  }

  /** Runs one check now (the timer calls this); resolves when done. */
  async checkNow(): Promise<void> {
    if (this.checking || this.watchers.size === 0) return;
    this.checking = true;
    try {
      for (const id of await this.keys.inactiveAmong([...this.watchers.keys()])) this.fire(id);
    } catch (error) {
      this.options.onError?.(error);
    } finally {
      this.checking = false;
    }
  }

  /** Stops watching everything (no callback is called). */
  close(): void {
    this.watchers.clear();
    this.stop();
  }

  private fire(apiKeyId: string): void {
    const callbacks = this.watchers.get(apiKeyId);
    if (!callbacks) return;
    this.watchers.delete(apiKeyId);
    if (this.watchers.size === 0) this.stop();
    for (const callback of callbacks) {
      try {
        callback();
      } catch (error) {
        this.options.onError?.(error);
      }
    }
  }

  private remove(apiKeyId: string, entry: () => void): void {
    const callbacks = this.watchers.get(apiKeyId);
    if (!callbacks?.delete(entry)) return;
    if (callbacks.size === 0) this.watchers.delete(apiKeyId);
    if (this.watchers.size === 0) this.stop();
  }

  private start(): void {
    if (this.timer) return;
    this.unsubscribe = this.keys.onRevoked((id) => this.fire(id));
    this.timer = setInterval(() => void this.checkNow(), this.intervalMs);
    this.timer.unref();
  }

  private stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    this.unsubscribe?.();
    this.unsubscribe = undefined;
  }
}
