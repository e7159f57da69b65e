/** Shared by the LiveKit benches: a participant's join token for the fake LiveKit server. */
import { AccessToken } from 'livekit-server-sdk';

export async function livekitToken(key: string, secret: string, identity: string, room: string): Promise<string> {
  const at = new AccessToken(key, secret, { identity, ttl: 600 });
  at.addGrant({ roomJoin: true, room, canPublish: true, canSubscribe: true });
  return at.toJwt();
}
