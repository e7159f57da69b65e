/**
 * `auth_enabled` agents (spec "Authentication" 7; the how is our decision, docs/sessions.md): the
 * site's own backend, which holds the agent's `auth_secret`, mints a short-lived connect token and
 * hands it to the page; the page sends it as `auth_token` in the connect body. The token is
 *
 *     v1.<expires_at>.<signature>
 *
 * where `expires_at` is a Unix time in seconds and `signature` the lower-case hex HMAC-SHA256,
 * keyed with the auth secret, of `v1.<agent_id>.<expires_at>.<client_user_ref or empty>`. It binds
 * the agent and the end user, expires on its own, and cannot be minted in the browser because the
 * secret never leaves the site's backend.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

export const CONNECT_AUTH_RULES = {
  /** Longest validity a token may claim: a page should fetch a fresh one per call. */
  maxValiditySeconds: 600,
  /** Tolerated clock difference between the site's backend and this server. */
  clockSkewSeconds: 30,
  maxTokenLength: 256,
} as const;

export function connectTokenPayload(agentId: string, expiresAt: number, clientUserRef: string | null | undefined): string {
  return `v1.${agentId}.${expiresAt}.${clientUserRef ?? ''}`;
}

/** Mints a connect token (what a site's backend does; also used by our demo page and tests). */
export function mintConnectToken(secret: string, agentId: string, options: { expiresAt?: number; clientUserRef?: string | null; nowMs?: number } = {}): string {
  const expiresAt = options.expiresAt ?? Math.floor((options.nowMs ?? Date.now()) / 1000) + 300;
  const signature = createHmac('sha256', secret).update(connectTokenPayload(agentId, expiresAt, options.clientUserRef)).digest('hex');
  return `v1.${expiresAt}.${signature}`;
}

/** Checks a connect token; returns null when valid, else why not (never echoing the secret). */
export function verifyConnectToken(secret: string, agentId: string, token: unknown, clientUserRef: string | null, nowMs: number): string | null {
  if (typeof token !== 'string' || token.length === 0) return 'this agent requires an auth_token (auth_enabled)';
  if (token.length > CONNECT_AUTH_RULES.maxTokenLength) return 'auth_token is not a valid connect token';
  // Canonical form only (no leading zero, lower-case hex): one token per (expiry, signature).
  const parts = /^v1\.([1-9]\d{0,11})\.([0-9a-f]{64})$/.exec(token);
  if (!parts) return 'auth_token is not a valid connect token';
  const expiresAt = Number(parts[1]);
  const now = nowMs / 1000;
  if (expiresAt + CONNECT_AUTH_RULES.clockSkewSeconds < now) return 'auth_token has expired';
  if (expiresAt - now > CONNECT_AUTH_RULES.maxValiditySeconds + CONNECT_AUTH_RULES.clockSkewSeconds) return `auth_token claims a validity over ${CONNECT_AUTH_RULES.maxValiditySeconds} s`;
  const expected = createHmac('sha256', secret).update(connectTokenPayload(agentId, expiresAt, clientUserRef)).digest();
  const given = Buffer.from(parts[2]!, 'hex');
  return given.length === expected.length && timingSafeEqual(given, expected) ? null : 'auth_token signature does not match';
}
