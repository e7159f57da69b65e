/** Shared by the LiveKit benches: a participant's join token for the fake LiveKit server. */
import type { LocalParticipant } from '@livekit/rtc-node';
import { AccessToken } from 'livekit-server-sdk';

export async function livekitToken(key: string, secret: string, identity: string, room: string): Promise<string> {
  const at = new AccessToken(key, secret, { identity, ttl: 600 });
  at.addGrant({ roomJoin: true, room, canPublish: true, canSubscribe: true });
  return at.toJwt();
}

let bursts = 0;

/**
 * 120 kB written at once as a byte stream to `destination`, in 9.6 kB writes, as the avatar
 * bench's agent writes a TTS segment (bench -- livekit-transport's LIVEKIT_TRANSPORT_BENCH_BURST).
 */
export async function writeBurst(participant: LocalParticipant, destination: string): Promise<void> {
  const writer = await participant.streamBytes({ name: `burst_${process.pid}_${bursts++}`, topic: 'bench.burst', destinationIdentities: [destination] });
  const bytes = new Uint8Array(120_000);
  for (let o = 0; o < bytes.length; o += 9600) await writer.write(bytes.subarray(o, o + 9600));
  await writer.close();
}
