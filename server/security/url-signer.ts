import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * HMAC-SHA256 signatures for the filesystem storage driver's expiring URLs. The signature
 * covers method, path and expiry, so a download URL cannot be replayed as an upload URL.
 */
export class UrlSigner {
  constructor(private readonly secret: string) {}

  sign(method: string, path: string, expiresAtMs: number): string {
    return createHmac('sha256', this.secret).update(`${method.toUpperCase()}\n${path}\n${expiresAtMs}`).digest('base64url');
  }

  verify(method: string, path: string, expiresAtMs: number, signature: string): boolean {
    const expected = Buffer.from(this.sign(method, path, expiresAtMs));
    const given = Buffer.from(signature);
    return expected.length === given.length && timingSafeEqual(expected, given);
  }
}
