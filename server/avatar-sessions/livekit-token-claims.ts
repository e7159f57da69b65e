/**
 * What an avatar session needs to know of the LiveKit token the agent minted for our worker,
 * read before anything joins: the room, the avatar's identity, the agent it publishes for
 * (`lk.publish_on_behalf`) and the expiry. The signature cannot be checked here (it is the
 * agent's LiveKit secret, which we never see): the LiveKit server checks it when the worker
 * joins. These checks only turn a token that could never work into a clear error instead of a
 * failed join.
 */
import { AVATAR_PROTOCOL } from '../../transports/livekit/index.ts';
import { ApiError } from '../http/api-error.ts';

export interface AvatarTokenClaims {
  readonly identity: string;
  readonly room: string;
  /** The agent the avatar publishes for. */
  readonly agentIdentity: string;
  /** Epoch ms (`exp` * 1000). */
  readonly expiresAtMs: number;
}

const invalid = (why: string) => new ApiError('livekit_token_invalid', `livekit_token: ${why}`);

function claimsOf(token: string): Record<string, unknown> {
  const parts = token.split('.');
  if (parts.length !== 3 || parts.some((p) => !/^[A-Za-z0-9_-]*$/.test(p))) throw invalid('not a JWT (three base64url parts)');
  let claims: unknown;
  try {
    claims = JSON.parse(Buffer.from(parts[1]!, 'base64url').toString('utf8'));
  } catch {
    throw invalid('its payload is not JSON');
  }
  if (!claims || typeof claims !== 'object' || Array.isArray(claims)) throw invalid('its payload is not a JSON object');
  return claims as Record<string, unknown>;
}

/** Reads and checks the claims; `nowMs` for the expiry. Throws `livekit_token_invalid` / `livekit_token_expired`. */
export function readAvatarTokenClaims(token: string, nowMs: number): AvatarTokenClaims {
  const claims = claimsOf(token);
  const video = (claims['video'] && typeof claims['video'] === 'object' ? claims['video'] : {}) as Record<string, unknown>;
  const identity = claims['sub'];
  if (typeof identity !== 'string' || identity === '') throw invalid('no identity (sub) for the avatar');
  if (video['roomJoin'] !== true || typeof video['room'] !== 'string' || video['room'] === '') throw invalid('no roomJoin grant for a named room');
  const attributes = (claims['attributes'] && typeof claims['attributes'] === 'object' ? claims['attributes'] : {}) as Record<string, unknown>;
  const agentIdentity = attributes[AVATAR_PROTOCOL.publishOnBehalfAttribute];
  if (typeof agentIdentity !== 'string' || agentIdentity === '') {
    throw invalid(`no ${AVATAR_PROTOCOL.publishOnBehalfAttribute} attribute: mint the avatar token with it set to the agent's identity, so the agent's clients take the avatar's tracks for the agent's`);
  }
  if (agentIdentity === identity) throw invalid(`the avatar (${identity}) cannot publish on behalf of itself`);
  if (video['canPublish'] === false || video['canPublishData'] === false) throw invalid('the avatar must be allowed to publish media and data');
  const exp = claims['exp'];
  if (typeof exp !== 'number' || !Number.isFinite(exp)) throw invalid('no expiry (exp)');
  const expiresAtMs = exp * 1000;
  if (expiresAtMs <= nowMs) throw new ApiError('livekit_token_expired', `livekit_token expired at ${new Date(expiresAtMs).toISOString()}: mint a new one`, { expired_at: new Date(expiresAtMs).toISOString() });
  const nbf = claims['nbf'];
  if (typeof nbf === 'number' && nbf * 1000 > nowMs + 60_000) throw invalid(`not valid before ${new Date(nbf * 1000).toISOString()}`);
  return { identity, room: video['room'] as string, agentIdentity, expiresAtMs };
}
