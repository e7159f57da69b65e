/**
 * A LiveKit Agents (Node) agent whose face is our avatar (docs/livekit-agents.md), with the
 * offline voice as a scripted TTS: it greets whoever joins, through the avatar.
 *
 *   LIVEKIT_URL=wss://lk.example.com LIVEKIT_API_KEY=... LIVEKIT_API_SECRET=... \
 *   SVC_API_URL=http://127.0.0.1:8080 SVC_API_KEY=sk_... ROOM=demo \
 *   npx tsx examples/livekit-agents/avatar-agent.ts
 *
 * It joins ROOM as `agent-<pid>` itself (no agent worker/dispatch needed), starts our
 * AvatarSession beside the AgentSession, says the greeting, and stays until Ctrl-C. Join the room
 * with any LiveKit client (the playground) to see and hear it. Our service must reach LIVEKIT_URL
 * (a private address only through SVC_LIVEKIT_ALLOWED_RANGES).
 */
import { ReadableStream } from 'node:stream/web';
import { Agent, AgentSession, initializeLogger } from '@livekit/agents';
import { AudioFrame, dispose, Room } from '@livekit/rtc-node';
import { AccessToken } from 'livekit-server-sdk';
import { AvatarSession } from 'svc-avatar/livekit-agents';
import { LocalTTSService } from 'svc-avatar/plugins/local';

const env = (name: string) => process.env[name] ?? (console.error(`${name} is required`), process.exit(2));
const livekitUrl = env('LIVEKIT_URL');
const apiKey = env('LIVEKIT_API_KEY');
const apiSecret = env('LIVEKIT_API_SECRET');
const roomName = process.env.ROOM ?? 'demo';
initializeLogger({ pretty: true, level: 'info' });

const token = new AccessToken(apiKey, apiSecret, { identity: `agent-${process.pid}` });
token.kind = 'agent';
token.addGrant({ roomJoin: true, room: roomName, canPublish: true, canSubscribe: true, canPublishData: true });
const room = new Room();
await room.connect(livekitUrl, await token.toJwt(), { autoSubscribe: true, dynacast: true });

const session = new AgentSession({});
// The two lines: our face as the agent's avatar (SVC_API_URL, SVC_API_KEY, LIVEKIT_* from the environment).
const avatar = new AvatarSession({ configId: process.env.SVC_CONFIG_ID ?? 'svc/human-portrait' });
console.log('avatar session', await avatar.start(session, room));
await session.start({ agent: new Agent({ instructions: 'You greet visitors.' }), room });

/** The offline voice (eSpeak-NG) at 24 kHz, as the 20 ms frames a TTS node yields. */
async function speak(text: string): Promise<ReadableStream<AudioFrame>> {
  const voice = new LocalTTSService();
  const frames: AudioFrame[] = [];
  for await (const e of voice.synthesize({ text, language: 'en', sampleRate: 24_000 })) {
    if (e.type !== 'audio') continue;
    for (let i = 0; i < e.pcm.length; i += 480) {
      const chunk = new Int16Array(480);
      chunk.set(e.pcm.subarray(i, i + 480));
      frames.push(new AudioFrame(chunk, 24_000, 1, 480));
    }
  }
  return new ReadableStream({ start: (c) => (frames.forEach((f) => c.enqueue(f)), c.close()) });
}

const greeting = 'Hello! I am a self-hosted avatar, speaking for a LiveKit agent.';
await session.say(greeting, { audio: await speak(greeting) }).waitForPlayout();
console.log('greeting played; Ctrl-C to leave');
process.once('SIGINT', async () => {
  await avatar.aclose();
  await session.close();
  await room.disconnect();
  await dispose();
  process.exit(0);
});
