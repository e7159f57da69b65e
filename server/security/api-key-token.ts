import { hash, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * API key material. Keys carry 256 random bits, so a fast SHA-256 is a sufficient hash
 * (no dictionary to defend against); the first characters are kept in clear for display.
 */
export const API_KEY_FORMAT = {
  /** Marks the string as one of our keys (secret scanners can match it). */
  scheme: 'svc_',
  randomBytes: 32,
  /** Characters kept for display: scheme plus 8 characters of the random part. */
  displayPrefixLength: 12,
} as const;

export function generateApiKey(): { key: string; prefix: string; hash: string } {
  const key = API_KEY_FORMAT.scheme + randomBytes(API_KEY_FORMAT.randomBytes).toString('base64url');
  return { key, prefix: key.slice(0, API_KEY_FORMAT.displayPrefixLength), hash: hashApiKey(key) };
}

/** Runs on every authenticated request: the one-shot `hash` builds no Hash stream object. */
export function hashApiKey(key: string): string {
  return hash('sha256', key, 'hex');
}

/** Constant-time comparison of a presented key against a stored hash. */
export function apiKeyMatches(key: string, storedHash: string): boolean {
  const presented = Buffer.from(hashApiKey(key), 'hex');
  const stored = Buffer.from(storedHash, 'hex');
  return presented.length === stored.length && timingSafeEqual(presented, stored);
}
