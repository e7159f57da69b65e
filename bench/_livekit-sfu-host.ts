/**
 * The fake LiveKit server (test/fakes/livekit-server.ts) alone in a process, so that the
 * livekit-sfu bench can read its CPU time from /proc: prints `url <ws url>` once it listens and
 * stops when its stdin closes (the bench ended, however it ended).
 */
import { startLiveKitServerFakeHere } from '../test/fakes/livekit-server.ts';

const fake = await startLiveKitServerFakeHere();
process.stdout.write(`url ${fake.url} key ${fake.apiKey} secret ${fake.apiSecret}\n`);
process.stdin.resume();
process.stdin.on('end', () => void fake.close().finally(() => process.exit(0)));
