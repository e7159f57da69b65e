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
   * Bumped by every revocation. A lookup only fills the cache when no revocation happened while
   * it ran: otherwise a lookup that read the key just before the revocation committed would put
   * the revoked key back into the cache after the revocation cleared it.
   */
  private generation = 0;

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
      return n > 0;
    } finally {
      // Lookups that started before the UPDATE committed may have read the key as active.
      this.invalidate();
    }
  }

  /** Forgets every cached lookup, including those still in flight. */
  invalidate(): void {
    this.generation++;
    this.cache.clear();
  }

  /** `authenticate` with a short-lived cache of successful lookups (see API_KEY_CACHE). */
  async authenticateCached(key: string): Promise<Principal | null> {
    const hash = hashApiKey(key);
    const hit = this.cache.get(hash);
    const now = Date.now();
    if (hit && hit.expiresAtMs > now) return hit.principal;
    const generation = this.generation;
    const principal = await this.authenticate(key);
    if (principal && generation === this.generation) {
      if (this.cache.size >= API_KEY_CACHE.maxEntries) this.cache.clear();
      this.cache.set(hash, { principal, expiresAtMs: now + API_KEY_CACHE.ttlMs });
    } else this.cache.delete(hash);
    return principal;
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
