/**
 * A participant in a process of its own for `bench -- livekit-transport`
 * (LIVEKIT_TRANSPORT_BENCH_BURST_PROCESS=on): joins the room given in argv (url, token,
 * destination) and, for each line on stdin, writes 120 kB as a byte stream to the destination at
 * once; it prints `ready` once joined and `sent` after each burst, and leaves when stdin ends.
 */
import { createInterface } from 'node:readline';
import { dispose, Room } from '@livekit/rtc-node';
import { writeBurst } from './_livekit.ts';

const [url, token, destination] = process.argv.slice(2) as [string, string, string];
const room = new Room();
await room.connect(url, token, { autoSubscribe: false, dynacast: false });
process.stdout.write('ready\n');
for await (const _line of createInterface({ input: process.stdin })) {
  await writeBurst(room.localParticipant!, destination);
  process.stdout.write('sent\n');
}
await room.disconnect();
await dispose();
