/**
 * The low-level /realtime client: 16 kHz mono int16 PCM in, raw protocol messages out.
 *
 *   SVC_API_KEY=... SVC_CONFIG_ID=svc/human-portrait SVC_REALTIME_URL=ws://127.0.0.1:8080/realtime \
 *     npx tsx examples/realtime-svc-client.ts
 */
import { resolveCredentials, SvcClient } from 'svc-avatar/clients';

const { apiKey, configId } = resolveCredentials(); // SVC_API_KEY, SVC_CONFIG_ID (environment or .env)
const client = new SvcClient({ apiKey, configId, url: process.env.SVC_REALTIME_URL });
client.messages$.subscribe((m) => {
  if (m.type === 'frame') {
    const f = m.frame; // f.image: JPEG bytes (absent under congestion), f.audio: 640 samples of 16 kHz
    if (f.final) console.log(`turn ${f.turnId} done at frame ${f.index} (${f.ptsMs} ms)`);
  } else if (m.type === 'error') console.error(m.code, m.message);
});
const ready = await client.connect();
console.log(`session ${ready.session_id}: ${ready.width}x${ready.height} at ${ready.fps} fps`);

const speech = Int16Array.from({ length: 16_000 }, (_, i) => Math.round(8000 * Math.sin(i / 10) * Math.sin(i / 900)));
client.startTurn();
client.sendAudio(speech, true); // end of turn after this chunk
setTimeout(() => client.close(), 3_000);
