/**
 * The way back: a browser that joins with its microphone sends it on the avatar's audio
 * transceiver, and the room hands it to the server side as 10 ms chunks (chromium's fake
 * capture device, a periodic beep, stands in for the user).
 */
import test from 'ava';
import { holdsWithin } from '../../testing/until.ts';
import { publishAvatar, RoomRegistry, type ParticipantAudio } from '../../transports/webrtc/index.ts';
import { launchChromium, startRoomServer } from './browser.ts';
import { joinRoom, waitForStats } from './page-probe.ts';
import { syntheticFaceFrames } from './synthetic-face.ts';

test('a browser microphone reaches the room while the avatar plays', async (t) => {
  const rooms = new RoomRegistry();
  const browser = await launchChromium(['--use-fake-device-for-media-stream']);
  const server = await startRoomServer(rooms);
  t.teardown(async () => {
    rooms.closeAll();
    await server.close();
    await browser.close();
  });
  const created = rooms.createRoom();
  const room = rooms.get(created.room)!;
  const heard: ParticipantAudio[] = [];
  room.participantAudio.subscribe((chunk) => heard.push(chunk));
  const published = await publishAvatar(await syntheticFaceFrames(), { provider: 'embedded', room: created.room, token: created.publisherToken }, { rooms });
  const page = await browser.newPage(server.httpUrl);
  const joined = await joinRoom(page, { url: server.signalUrl, token: created.subscriberToken, microphone: true });
  t.true(joined.ok);
  const stats = await waitForStats(page, (s) => s.framesDecoded > 10);
  t.true(stats.framesDecoded > 10, 'the avatar still plays');
  const loud = () => heard.some((c) => rms(c.samples) > 0.01);
  await holdsWithin(() => loud() && heard.length > 50, { timeoutMs: 20_000, intervalMs: 100 });
  t.true(heard.length > 50, `only ${heard.length} chunks of microphone audio`);
  t.true(loud(), 'the fake microphone beeps; some chunk must carry sound');
  t.true(heard.every((c) => joined.ok && c.participantId === joined.participantId));
  t.true([8_000, 16_000, 32_000, 48_000].includes(heard[0]!.sampleRate), `rate ${heard[0]!.sampleRate}`);
  t.log(`microphone chunks: ${heard[0]!.sampleRate} Hz, ${heard[0]!.channels} channel(s)`);
  t.is(heard[0]!.samples.length, (heard[0]!.sampleRate / 100) * heard[0]!.channels);
  await published.close();
});

function rms(samples: Int16Array): number {
  let sum = 0;
  for (const v of samples) sum += v * v;
  return Math.sqrt(sum / Math.max(1, samples.length)) / 32768;
}
