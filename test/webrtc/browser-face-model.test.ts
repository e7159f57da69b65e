/**
 * The real face model through a real browser: a `human-portrait` session (plugins/face) is
 * published into an embedded room; chromium decodes its frames at the session's size and hears
 * the speech pushed into it. Skipped (with the reason) while the face plugin cannot open
 * sessions; the synthetic-frame tests in browser-room.test.ts cover the same contract meanwhile.
 */
import test from 'ava';
import { RealClock } from '../../core/clock.ts';
import { Registry } from '../../core/registry.ts';
import { facePlugin } from '../../plugins/face/index.ts';
import type { FaceModel } from '../../processors/avatar/face-model.ts';
import { publishAvatar, RoomRegistry } from '../../transports/webrtc/index.ts';
import { launchChromium, startRoomServer } from './browser.ts';
import { joinRoom, receiverStats, waitForStats } from './page-probe.ts';
import { toneFrame } from './synthetic-face.ts';

async function openPortraitModel(): Promise<{ model: FaceModel } | { reason: string }> {
  try {
    const registry = new Registry();
    registry.use(facePlugin);
    const model = registry.create<FaceModel>('face', 'human-portrait', {});
    const probe = await model.openSession(undefined, new RealClock());
    probe.close();
    return { model };
  } catch (error) {
    return { reason: error instanceof Error ? error.message : String(error) };
  }
}

const opened = await openPortraitModel();
const faceTest = 'model' in opened ? test : test.skip;

faceTest(`a human-portrait session plays in the browser${'reason' in opened ? ` (skipped: ${opened.reason})` : ''}`, async (t) => {
  if (!('model' in opened)) return;
  const rooms = new RoomRegistry();
  const browser = await launchChromium();
  const server = await startRoomServer(rooms);
  const session = await opened.model.openSession(undefined, new RealClock());
  t.teardown(async () => {
    session.close();
    rooms.closeAll();
    await server.close();
    await browser.close();
  });
  const created = rooms.createRoom();
  const published = await publishAvatar(session.frames, { provider: 'embedded', room: created.room, token: created.publisherToken }, { rooms });
  const page = await browser.newPage(server.httpUrl);
  const joinedAt = Date.now();
  t.true((await joinRoom(page, { url: server.signalUrl, token: created.subscriberToken })).ok);
  const first = await waitForStats(page, (s) => s.framesDecoded > 0);
  t.log(`${session.width}x${session.height} ${session.imageFormat}: first decoded frame ${Date.now() - joinedAt} ms after join`);
  t.true(first.framesDecoded > 0);
  const idle = await waitForStats(page, (s) => s.framesDecoded > 10 && s.frameWidth > 0);
  t.is(idle.frameWidth, session.width & ~1);
  t.is(idle.frameHeight, session.height & ~1);
  const energyBefore = idle.totalAudioEnergy;
  // Two seconds of a loud tone as speech: the frames carry it, the browser must hear it.
  const speech = new Int16Array(50 * 640);
  for (let i = 0; i < 50; i++) speech.set(toneFrame(i, 0.4), i * 640);
  session.pushAudio(speech);
  session.endTurn();
  const spoken = await waitForStats(page, (s) => s.totalAudioEnergy > energyBefore + 0.05);
  t.true(spoken.totalAudioEnergy > energyBefore + 0.05, `no speech heard: ${JSON.stringify(spoken)}`);
  t.true(spoken.framesDecoded > idle.framesDecoded);
  t.is(published.stats.badImages, 0);
  t.log(`publisher stats ${JSON.stringify(published.stats)}`);
  t.is((await receiverStats(page)).connectionState, 'connected');
});
