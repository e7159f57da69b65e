/**
 * Measurement (not a test): how far apart a browser plays the avatar's picture and sound after
 * the embedded WebRTC path. Once a second the synthetic face shows a white frame whose 40 ms of
 * audio is a 1 kHz burst (all other frames dark and silent). In chromium, the flash is timed with
 * requestVideoFrameCallback (expected display time), the burst with an AudioWorklet on the
 * received stream (context time mapped to performance time with getOutputTimestamp, plus the
 * output latency). Prints one JSON line. Run: npx tsx test/webrtc/measure-av-sync.ts
 * (env AV_SECONDS, AV_WARMUP_MS, AV_VIDEO_DELAY_FRAMES). Negative = the picture shows before the
 * sound is heard.
 */
import sharp from 'sharp';
import { Observable } from 'rxjs';
import { FACE_TIMING, type FaceFrame } from '../../processors/avatar/face-model.ts';
import { publishAvatar, RoomRegistry } from '../../transports/webrtc/index.ts';
import { launchChromium, startRoomServer } from './browser.ts';
import { joinRoom, waitForStats } from './page-probe.ts';

const WIDTH = 320;
const HEIGHT = 240;
const SECONDS = Number(process.env.AV_SECONDS ?? 12);
/** The publisher's `videoDelayFrames` to measure with. */
const VIDEO_DELAY_FRAMES = Number(process.env.AV_VIDEO_DELAY_FRAMES ?? 0);

async function solid(v: number): Promise<Uint8Array> {
  return new Uint8Array(await sharp({ create: { width: WIDTH, height: HEIGHT, channels: 3, background: { r: v, g: v, b: v } } }).jpeg().toBuffer());
}

function flashingFrames(dark: Uint8Array, white: Uint8Array): Observable<FaceFrame> {
  return new Observable<FaceFrame>((subscriber) => {
    const start = performance.now();
    let index = 0;
    let timer: ReturnType<typeof setTimeout>;
    const tick = () => {
      const flash = index % 25 === 12;
      const audio = new Int16Array(FACE_TIMING.samplesPerFrame);
      if (flash) for (let i = 0; i < audio.length; i++) audio[i] = Math.round(0.6 * 32767 * Math.sin((2 * Math.PI * 1000 * i) / 16_000));
      subscriber.next({ index, ptsMs: index * 40, type: 'speech', final: false, turnId: 1, image: { width: WIDTH, height: HEIGHT, format: 'jpeg', data: flash ? white : dark }, audio });
      index++;
      timer = setTimeout(tick, Math.max(0, start + index * 40 - performance.now()));
    };
    tick();
    return () => clearTimeout(timer);
  });
}

const rooms = new RoomRegistry();
const browser = await launchChromium();
const server = await startRoomServer(rooms);
try {
  const created = rooms.createRoom();
  const published = await publishAvatar(flashingFrames(await solid(20), await solid(235)), { provider: 'embedded', room: created.room, token: created.publisherToken }, { rooms, videoDelayFrames: VIDEO_DELAY_FRAMES });
  const page = await browser.newPage(server.httpUrl);
  await joinRoom(page, { url: server.signalUrl, token: created.subscriberToken });
  await waitForStats(page, (s) => s.framesDecoded > 0 && s.tracks.length === 2);
  await page.evaluate('window.__name = (f) => f'); // tsx keeps function names with a helper the page lacks
  // Let the receiver's A/V synchronisation settle before measuring.
  await new Promise((resolve) => setTimeout(resolve, Number(process.env.AV_WARMUP_MS ?? 5000)));
  const result = await page.evaluate(async (seconds) => {
    const w = window as unknown as Record<string, any>;
    const stream: MediaStream = w.__room.stream;
    const video = document.getElementById('avatar') as HTMLVideoElement;
    const canvas = document.createElement('canvas');
    canvas.width = 8;
    canvas.height = 8;
    const g = canvas.getContext('2d', { willReadFrequently: true })!;
    const flashes: number[] = [];
    let wasBright = false;
    const onFrame = (_now: number, meta: { expectedDisplayTime: number }) => {
      g.drawImage(video, 0, 0, 8, 8);
      const px = g.getImageData(0, 0, 8, 8).data;
      let sum = 0;
      for (let i = 0; i < px.length; i += 4) sum += px[i]!;
      const bright = sum / 64 > 128;
      if (bright && !wasBright) flashes.push(meta.expectedDisplayTime);
      wasBright = bright;
      (video as any).requestVideoFrameCallback(onFrame);
    };
    (video as any).requestVideoFrameCallback(onFrame);

    const ctx = new AudioContext({ latencyHint: 'interactive' });
    const worklet = `registerProcessor('onset', class extends AudioWorkletProcessor {
      constructor() { super(); this.loud = false; }
      process(inputs) {
        const ch = inputs[0] && inputs[0][0];
        if (ch) {
          let peak = 0; let first = -1;
          for (let i = 0; i < ch.length; i++) { const a = Math.abs(ch[i]); if (a > 0.2 && first < 0) first = i; if (a > peak) peak = a; }
          if (peak > 0.2 && !this.loud) this.port.postMessage(currentTime + first / sampleRate);
          this.loud = peak > 0.05;
        }
        return true;
      }
    });`;
    await ctx.audioWorklet.addModule(URL.createObjectURL(new Blob([worklet], { type: 'text/javascript' })));
    const node = new AudioWorkletNode(ctx, 'onset');
    ctx.createMediaStreamSource(stream).connect(node);
    node.connect(ctx.destination);
    await ctx.resume();
    const bursts: number[] = [];
    node.port.onmessage = (e) => {
      // Map the context time of the onset to the performance time it is heard.
      const ts = ctx.getOutputTimestamp();
      bursts.push(ts.performanceTime! + (e.data - ts.contextTime!) * 1000 + (ctx.outputLatency || 0) * 1000);
    };
    await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
    const delays: Record<string, number> = {};
    (await w.__room.peerConnection.getStats()).forEach((r: any) => {
      if (r.type !== 'inbound-rtp') return;
      delays[`${r.kind}_jitter_buffer_ms`] = +((1000 * r.jitterBufferDelay) / Math.max(1, r.jitterBufferEmittedCount)).toFixed(1);
      delays[`${r.kind}_jitter_buffer_target_ms`] = +((1000 * (r.jitterBufferTargetDelay ?? 0)) / Math.max(1, r.jitterBufferEmittedCount)).toFixed(1);
      if (r.kind === 'video') delays.video_processing_ms = +((1000 * r.totalProcessingDelay) / Math.max(1, r.framesDecoded)).toFixed(1);
    });
    return { flashes, bursts, delays, outputLatencyMs: (ctx.outputLatency || 0) * 1000, baseLatencyMs: ctx.baseLatency * 1000 };
  }, SECONDS);
  // Pair each flash with the nearest burst.
  const offsets: number[] = [];
  for (const f of result.flashes) {
    const nearest = result.bursts.reduce((best, b) => (Math.abs(b - f) < Math.abs(best - f) ? b : best), Number.POSITIVE_INFINITY);
    if (Math.abs(nearest - f) < 500) offsets.push(f - nearest);
  }
  offsets.sort((a, b) => a - b);
  const median = offsets[Math.floor(offsets.length / 2)] ?? NaN;
  console.log(JSON.stringify({
    bench: 'webrtc_av_sync',
    video_delay_frames: VIDEO_DELAY_FRAMES,
    pairs: offsets.length,
    flashes: result.flashes.length,
    bursts: result.bursts.length,
    video_minus_audio_ms_median: +median.toFixed(1),
    min: +(offsets[0] ?? NaN).toFixed(1),
    max: +(offsets.at(-1) ?? NaN).toFixed(1),
    output_latency_ms: +result.outputLatencyMs.toFixed(1),
    ...result.delays,
    publisher: published.stats,
  }));
  await published.close();
} catch (error) {
  console.error("measurement failed:", error);
  process.exitCode = 1;
} finally {
  rooms.closeAll();
  await server.close();
  await browser.close();
}
