/**
 * The high-level speech-to-video client: TTS audio at any rate in, synchronized audio and RGB
 * video frames out of `outputStream()` on a 25 fps clock, events, barge-in.
 *
 *   SVC_API_KEY=... SVC_CONFIG_ID=svc/human-portrait SVC_REALTIME_URL=ws://127.0.0.1:8080/realtime \
 *     npx tsx examples/realtime-stv-client.ts
 */
import { resolveCredentials, SvcSTVClient, type STVOutput } from 'svc-avatar/clients';

const { apiKey, configId } = resolveCredentials();
const client = new SvcSTVClient({ apiKey, configId, url: process.env.SVC_REALTIME_URL });
client.on('BOT_STARTED_SPEAKING', () => console.log('speaking'));
client.on('BOT_STOPPED_SPEAKING', async (p) => console.log('stopped', p)); // async handlers work too
client.on('ERROR', (p) => console.error('error:', p.message));
await client.connect();

const tts = Int16Array.from({ length: 24_000 * 2 }, (_, i) => Math.round(8000 * Math.sin(i / 15) * Math.sin(i / 1400)));
client.say(tts, 24_000); // 2 s of 24 kHz mono TTS: the server gets a 16 kHz copy, you get 24 kHz back
setTimeout(() => console.log('barge-in sent a cancel:', client.interrupt()), 1_000);
setTimeout(() => client.close(), 3_000);

let frames = 0;
for await (const out of client.outputStream() as AsyncIterable<STVOutput>) {
  if (out.kind === 'audio') {
    // out.pcm: 40 ms at out.sampleRate, to your speaker
  } else if (++frames % 25 === 0) {
    console.log(`video frame ${out.frameIndex}: ${out.width}x${out.height} RGB, ${out.frameType}`);
  }
}
