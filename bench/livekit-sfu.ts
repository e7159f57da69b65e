/**
 * What the fake LiveKit server (test/fakes/livekit-server.ts) costs the test machine while it
 * forwards one avatar (publishAvatar, 640x360 at 25 fps, speech) to one visitor (@livekit/rtc-node
 * subscribing to both tracks), as LiveKit tests do. The fake runs in a process of its own
 * (`startLiveKitServerFake`); its CPU time comes from /proc/<pid>/stat over a window once the
 * visitor receives video. Figures: the fake's share of one core, the frames the visitor got in the
 * window, and the publishing process's own share for scale.
 */
import { readFileSync } from 'node:fs';
import { dispose } from '@livekit/rtc-node';
import { RealClock } from '../core/clock.ts';
import { HumanFaceModel } from '../plugins/face/index.ts';
import { publishAvatar } from '../transports/webrtc/index.ts';
import { LiveKitVisitor } from '../test/agent/livekit-visitor.ts';
import { startLiveKitServerFake } from '../test/fakes/livekit-server.ts';
import { syntheticPhrase } from '../test/face/speech-signal.ts';
import { until } from '../testing/until.ts';
import { livekitToken as token } from './_livekit.ts';
import { printJson, printTable } from './table.ts';

const WINDOW_MS = Number(process.env.LIVEKIT_SFU_BENCH_WINDOW_MS ?? 10_000);
const WIDTH = 640;
const HEIGHT = 360;
const TICKS = 100; // USER_HZ on Linux

/** utime + stime of a process, in ms. */
function cpuMsOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS;
}

export async function run(): Promise<void> {
  const fake = await startLiveKitServerFake();
  const { url, apiKey: key, apiSecret: secret } = fake;
  const room = 'bench-room';
  const session = await new HumanFaceModel('human-portrait').openSession({ configuration: { width: WIDTH, height: HEIGHT } }, new RealClock());
  const published = await publishAvatar(session.frames, { provider: 'livekit', url, token: await token(key, secret, 'avatar', room) }, { livekitAllowedRanges: ['127.0.0.0/8'] });
  const visitor = await LiveKitVisitor.join(url, await token(key, secret, 'visitor', room));
  try {
    await until(() => visitor.videoFrames >= 25, { timeoutMs: 60_000, what: 'video at the visitor' }).catch((error: Error) => {
      throw new Error(`${error.message}: the visitor got ${visitor.audioLevels.length} audio chunks, ${visitor.videoFrames} frames, tracks of ${[...visitor.trackOwners].join(', ')}; the avatar sent ${JSON.stringify(published.stats)}`);
    });
    const speak = setInterval(() => {
      session.pushAudio(syntheticPhrase(8));
      session.endTurn();
    }, 3000);
    const fake0 = cpuMsOf(fake.pid);
    const self0 = process.cpuUsage();
    const frames0 = visitor.videoFrames;
    const t0 = performance.now();
    await new Promise((resolve) => setTimeout(resolve, WINDOW_MS));
    const wallMs = performance.now() - t0;
    clearInterval(speak);
    const fakeShare = (cpuMsOf(fake.pid) - fake0) / wallMs;
    const self = process.cpuUsage(self0);
    const selfShare = (self.user + self.system) / 1000 / wallMs;
    const fps = ((visitor.videoFrames - frames0) * 1000) / wallMs;
    const loadavg = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
    printTable([{ size: `${WIDTH}x${HEIGHT}`, 'window s': wallMs / 1000, 'fake SFU core share': fakeShare, 'visitor fps': fps, 'publisher+visitor core share': selfShare, loadavg }]);
    printJson('livekit-sfu', { width: WIDTH, height: HEIGHT, windowMs: Math.round(wallMs), fakeCoreShare: Number(fakeShare.toFixed(3)), visitorFps: Number(fps.toFixed(1)), clientCoreShare: Number(selfShare.toFixed(3)), loadavg });
  } finally {
    await visitor.close();
    await published.close();
    await session.close();
    await fake.close();
    await dispose();
  }
}
