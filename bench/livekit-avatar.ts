/**
 * `npm run bench -- livekit-avatar`: our avatar in a LiveKit Agents room (docs/livekit-agents.md),
 * through the fake LiveKit server (it forwards RTP packets, as a real SFU does). Per run: a new room,
 * a scripted agent (rtc-node speaking the avatar protocol as @livekit/agents' DataStreamAudioOutput
 * does: 24 kHz byte streams, lk.clear_buffer), a visitor (rtc-node) and POST /v1/avatar-sessions
 * with the default face (svc/human-portrait, 640x360) on PGlite.
 *
 * Figures: join (request to the avatar's first video frame at the visitor), first TTS byte to the
 * first lip-synced frame at the visitor (the mouth region moving beyond the idle face's motion),
 * A/V offset at the visitor (that frame against the first audible 10 ms of the speech; positive:
 * the picture after its sound; and `av_xcorr`, over the whole speech before the clear: the lag that
 * best correlates the visitor's audio level with the mouth's distance from the idle face, in 10 ms
 * steps, with that correlation `r`), clear_buffer to silence (the RPC sent to the end of the last 10 ms
 * above -40 dBFS at the visitor; and to quiet, above -26 dBFS: bench -- livekit-transport gives
 * the transport's own floor under both; `clear_to_silence_played` times the last loud frame by the
 * receiver's stream instead of by when this process read it, LiveKitVisitor.playedAt).
 * LIVEKIT_AVATAR_BENCH_VERBOSE prints the 10 ms the visitor played around each clear (time by the
 * stream, dBFS, zero crossings). The visitor's audio jitter buffer (libwebrtc's mean delay per
 * sample played, and its target) over the idle face and over the speech: what the clear's tail
 * waits through at the visitor besides our worker's part, and what the rig's own jitter grows.
 * LIVEKIT_AVATAR_BENCH_STREAM: `burst` (default, the segment written at once) or `paced` (each 200
 * ms piece when due): the burst also loads the fake SFU and every process on this machine at once
 * (docs/livekit-agents.md, "Found: the agent's burst" and "Media before data").
 * LIVEKIT_AVATAR_BENCH_RUNS (default 5); the worker's media settings where they differ from its
 * defaults (LIVEKIT_AVATAR_WORKER_DEFAULTS): LIVEKIT_AVATAR_BENCH_VIDEO_DELAY_FRAMES,
 * LIVEKIT_AVATAR_BENCH_SPEECH_LEAD_MS (`off`: the idle silence queued is kept),
 * LIVEKIT_AVATAR_BENCH_PICTURE_LAG_MS (`off`: pictures held back by the frame count instead). How long
 * the visitor watches the idle face before the speech: LIVEKIT_AVATAR_BENCH_SETTLE_MS (default 1600,
 * at least 40 frames: the baseline of mouth motion). The fake SFU forwards packets in a process
 * of its own, as a LiveKit server is. The load average is printed: the machine is shared.
 *
 * Where the server runs (LIVEKIT_AVATAR_BENCH_SERVER): `process` (the default) is `npm start` in
 * a process of its own, as a deployment runs it, while this process is the agent and the visitor
 * (in a deployment they are an agent worker and a browser elsewhere); `inline` builds the server
 * in this process, beside them (the bench's shape until 2026-12-01: the visitor's timestamps then
 * wait for whatever the server's event loop is doing, its video frame copies and the agent's
 * packets too). The media settings above exist only inline (npm start has no setting for them):
 * setting one runs the server inline.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { dispose, Room } from '@livekit/rtc-node';
import { AccessToken } from 'livekit-server-sdk';
import { concat } from '../core/audio.ts';
import { Registry } from '../core/registry.ts';
import { facePlugin } from '../plugins/face/index.ts';
import { LocalTTSService } from '../plugins/local/index.ts';
import { createServer } from '../server/build-server.ts';
import { mountAvatarSessions } from '../server/avatar-sessions/index.ts';
import { createCapacityGate } from '../server/capacity/index.ts';
import { LIVEKIT_AVATAR_WORKER_DEFAULTS } from '../transports/livekit/index.ts';
import { jitterBufferMs, LiveKitVisitor } from '../test/agent/livekit-visitor.ts';
import { startLiveKitServerFake } from '../test/fakes/livekit-server.ts';
import { SECRETS } from '../test/server/harness.ts';
import { startServerProcess } from '../test/sessions/server-process.ts';
import { regionMotion } from '../test/sessions/conversation-audio.ts';
import { pearson } from '../test/face/speech-signal.ts';
import { holdsWithin } from '../testing/until.ts';
import { choice } from './_knobs.ts';
import { percentile, printJson, printTable } from './table.ts';

const RUNS = Number(process.env.LIVEKIT_AVATAR_BENCH_RUNS ?? 5);
const VIDEO_DELAY_FRAMES = process.env.LIVEKIT_AVATAR_BENCH_VIDEO_DELAY_FRAMES;
const SPEECH_LEAD_MS = process.env.LIVEKIT_AVATAR_BENCH_SPEECH_LEAD_MS;
const PICTURE_LAG_MS = process.env.LIVEKIT_AVATAR_BENCH_PICTURE_LAG_MS;
/** LIVEKIT_AVATAR_BENCH_STREAM: `burst` (default: the segment written at once, as a TTS faster than real time does) or `paced` (in real time). */
const STREAM = choice('LIVEKIT_AVATAR_BENCH_STREAM', ['burst', 'paced']);
const PACED = STREAM === 'paced';
const SETTLE_MS = Number(process.env.LIVEKIT_AVATAR_BENCH_SETTLE_MS ?? 1600);
const MEDIA_SET = Boolean(VIDEO_DELAY_FRAMES || SPEECH_LEAD_MS || PICTURE_LAG_MS);
const SERVER = choice('LIVEKIT_AVATAR_BENCH_SERVER', MEDIA_SET ? ['inline', 'process'] : ['process', 'inline']);
if (SERVER === 'process' && MEDIA_SET) throw new Error('the media settings (LIVEKIT_AVATAR_BENCH_VIDEO_DELAY_FRAMES, _SPEECH_LEAD_MS, _PICTURE_LAG_MS) exist only with LIVEKIT_AVATAR_BENCH_SERVER=inline');
if (!(SETTLE_MS >= 0)) throw new Error(`LIVEKIT_AVATAR_BENCH_SETTLE_MS must be a number of ms, got ${process.env.LIVEKIT_AVATAR_BENCH_SETTLE_MS}`);
const RATE = 24_000;
const MOUTH: [number, number, number, number] = [0.4, 0.38, 0.5, 0.47];

async function speechBytes(voice: LocalTTSService, text: string): Promise<Uint8Array> {
  const parts: Int16Array[] = [];
  for await (const e of voice.synthesize({ text, language: 'en', sampleRate: RATE })) if (e.type === 'audio') parts.push(e.pcm);
  const pcm = concat(parts);
  return new Uint8Array(pcm.buffer, pcm.byteOffset, pcm.byteLength);
}

const AV_STEP_MS = 10;
const AV_MAX_LAG_MS = 200;

/**
 * The A/V offset over the whole speech heard before the clear, not only its first sound: the lag
 * (ms, positive: the picture after its sound) that best correlates the visitor's audio level (10 ms)
 * with how far the mouth is from the idle face's (each picture held until the next, as shown),
 * on a 10 ms grid within +-200 ms; `r` is that correlation.
 */
function avLag(levels: readonly { at: number; rms: number }[], video: readonly { at: number; open: number }[], from: number, to: number): { lagMs: number; r: number } {
  const steps = Math.floor((to - from) / AV_STEP_MS);
  const audio = new Array<number>(steps).fill(0);
  for (const l of levels) {
    const k = Math.floor((l.at - from) / AV_STEP_MS);
    if (k >= 0 && k < steps) audio[k] = Math.max(audio[k]!, l.rms);
  }
  const pictures = video.filter((v) => v.at >= from - 1000 && v.at <= to + AV_MAX_LAG_MS);
  const shown = (t: number) => {
    let open = 0;
    for (const v of pictures) {
      if (v.at > t) break;
      open = v.open;
    }
    return open;
  };
  const maxLag = AV_MAX_LAG_MS / AV_STEP_MS;
  const mouth = Array.from({ length: steps + maxLag }, (_, k) => shown(from + k * AV_STEP_MS));
  let best = { lagMs: NaN, r: -Infinity };
  // The mouth grid starts at `from` (the picture shown then): a negative lag leaves out the first audio steps.
  for (let lag = -maxLag; lag <= maxLag; lag++) {
    const a: number[] = [];
    const v: number[] = [];
    for (let k = Math.max(0, -lag); k < steps; k++) {
      a.push(audio[k]!);
      v.push(mouth[k + lag]!);
    }
    const r = pearson(a, v);
    if (r > best.r) best = { lagMs: lag * AV_STEP_MS, r };
  }
  return best;
}

interface BenchServer {
  readonly url: string;
  readonly key: string;
  close(): Promise<void>;
}

/** `npm start` on PGlite in `dataDir`, its first-start key, LiveKit rooms on this machine allowed. */
async function serverProcess(dataDir: string): Promise<BenchServer> {
  const server = await startServerProcess({ SVC_DATA_DIR: dataDir, DATABASE_URL: '', SVC_LIVEKIT_ALLOWED_RANGES: '127.0.0.0/8' });
  const key = server.firstKey;
  if (!key) {
    server.kill('SIGKILL');
    throw new Error(`no first-start API key in the server output:\n${server.output}`);
  }
  return {
    url: server.url,
    key,
    async close() {
      server.kill('SIGTERM');
      const gone = await Promise.race([server.exited.then(() => true), new Promise<false>((resolve) => setTimeout(() => resolve(false), 10_000).unref())]);
      if (!gone) server.kill('SIGKILL');
    },
  };
}

/** The server in this process, with the worker's media settings. */
async function inlineServer(dataDir: string, media: { videoDelayFrames?: number; speechLeadMs?: number; pictureLagMs?: number | null }): Promise<BenchServer> {
  const registry = new Registry();
  registry.use(facePlugin);
  const server = await createServer({ ...SECRETS, port: 0, host: '127.0.0.1', logLevel: 'silent', dataDir, livekitAllowedRanges: ['127.0.0.0/8'] }, { registry });
  const { url } = await server.listen();
  const key = (await server.services.apiKeys.create('bench-org', 'bench')).key;
  // Count only: one session at a time, and the shared machine's load must not refuse the bench's sessions.
  const capacity = createCapacityGate({ limit: 2, loadCheck: false });
  const avatars = mountAvatarSessions(server, { capacity, media });
  return {
    url,
    key,
    async close() {
      await avatars.close();
      capacity.close();
      await server.close();
    },
  };
}

export async function run(): Promise<void> {
  const fake = await startLiveKitServerFake();
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-lkavatar-'));
  const media = {
    ...(VIDEO_DELAY_FRAMES ? { videoDelayFrames: Number(VIDEO_DELAY_FRAMES) } : {}),
    // 'off': a lead longer than any queue, so nothing is ever dropped.
    ...(SPEECH_LEAD_MS ? { speechLeadMs: SPEECH_LEAD_MS === 'off' ? Number.POSITIVE_INFINITY : Number(SPEECH_LEAD_MS) } : {}),
    ...(PICTURE_LAG_MS ? { pictureLagMs: PICTURE_LAG_MS === 'off' ? null : Number(PICTURE_LAG_MS) } : {}),
  };
  const { url, key, close: closeServer } = SERVER === 'process' ? await serverProcess(dataDir) : await inlineServer(dataDir, media);
  const voice = new LocalTTSService();
  await voice.warmUp();
  const phrase = await speechBytes(voice, 'Welcome to the space station tour. The crew is waiting for you.');
  const mint = async (identity: string, room: string, attributes?: Record<string, string>) => {
    const at = new AccessToken(fake.apiKey, fake.apiSecret, { identity, ttl: 600, ...(attributes ? { attributes } : {}) });
    if (attributes) at.kind = 'agent';
    at.addGrant({ roomJoin: true, room });
    return at.toJwt();
  };
  const rows: Array<Record<string, number>> = [];
  const load = loadavg()[0]!;
  for (let i = 0; i < RUNS; i++) {
    const room = `bench-room-${i}`;
    const agent = new Room();
    await agent.connect(fake.url, await mint('agent-1', room, {}), { autoSubscribe: false, dynacast: false });
    agent.localParticipant!.registerRpcMethod('lk.playback_started', async () => 'ok');
    agent.localParticipant!.registerRpcMethod('lk.playback_finished', async () => 'ok');
    const visitor = await LiveKitVisitor.join(fake.url, await mint('visitor', room));
    const video: Array<{ at: number; mouth: number; open: number }> = [];
    let last: Uint8Array | null = null;
    // The idle face's last picture before the speech: how far the mouth is from it is how open it is.
    let rest: Uint8Array | null = null;
    visitor.onVideoFrame = (frame, at) => {
      const luma = frame.data.subarray(0, frame.width * frame.height);
      const same = (other: Uint8Array | null): other is Uint8Array => other !== null && other.length === luma.length;
      video.push({ at, mouth: same(last) ? regionMotion(last, luma, frame.width, frame.height, MOUTH) : 0, open: same(rest) ? regionMotion(rest, luma, frame.width, frame.height, MOUTH) : 0 });
      last = Uint8Array.from(luma);
    };
    /** Zero crossings of each audio frame the visitor read, by its level record (verbose only). */
    const crossings = new Map<object, number>();
    if (process.env.LIVEKIT_AVATAR_BENCH_VERBOSE) {
      visitor.onAudio = (samples) => {
        let zc = 0;
        for (let k = 1; k < samples.length; k++) if (samples[k]! >= 0 !== samples[k - 1]! >= 0) zc++;
        // Called right after the frame's level is recorded.
        crossings.set(visitor.audioLevels.at(-1)!, zc);
      };
    }
    const requestedAt = Date.now();
    const res = await fetch(`${url}/v1/avatar-sessions`, {
      method: 'POST',
      headers: { 'X-API-Key': key, 'Content-Type': 'application/json' },
      body: JSON.stringify({ config_id: 'svc/human-portrait', livekit_url: fake.url, livekit_token: await mint('svc-avatar', room, { 'lk.publish_on_behalf': 'agent-1' }) }),
    });
    const session = (await res.json()) as { avatar_session_id: string };
    if (res.status !== 201) throw new Error(`POST /v1/avatar-sessions: ${res.status} ${JSON.stringify(session)}`);
    const sessionMetrics = async () =>
      ((await (await fetch(`${url}/v1/avatar-sessions/${session.avatar_session_id}`, { headers: { 'X-API-Key': key } })).json()) as { metrics: { first_audio_to_first_speech_frame_ms?: number | null; av_offset_ms?: number | null; last_clear_at?: string | null; audio_underruns?: number; audio_underrun_ms?: number } }).metrics;
    await holdsWithin(() => video.length > 0, { timeoutMs: 30_000, intervalMs: 5 });
    const joinMs = (video[0]?.at ?? NaN) - requestedAt;
    // 1.6 s of idle face at least: the baseline of mouth motion (and the visitor's jitter buffers settle).
    const settleFrom = Date.now();
    const settleBuffer = await visitor.jitterBuffer();
    await holdsWithin(() => video.length > 40 && Date.now() - settleFrom >= SETTLE_MS - 1600, { timeoutMs: 10_000 + SETTLE_MS, intervalMs: 5 });
    const idle = video.slice(5).map((v) => v.mouth);
    const mean = idle.reduce((a, b) => a + b, 0) / idle.length;
    const sd = Math.sqrt(idle.reduce((a, b) => a + (b - mean) ** 2, 0) / idle.length);
    const threshold = Math.max(mean + 4 * sd, mean * 2);

    rest = last;
    // The visitor's jitter buffer over the idle face and over the speech (read here and before the clear).
    const speechFrom = await visitor.jitterBuffer();
    const idleBuffer = jitterBufferMs(settleBuffer, speechFrom);
    // A segment, sent as a TTS streams it (all at once, faster than real time).
    const firstByteAt = Date.now();
    const writer = await agent.localParticipant!.streamBytes({ name: `AUDIO_${i}`, topic: 'lk.audio_stream', destinationIdentities: ['svc-avatar'], attributes: { sample_rate: String(RATE), num_channels: '1' } });
    const writing = (async () => {
      for (let o = 0; o < phrase.length; o += 9600) {
        await writer.write(phrase.subarray(o, o + 9600));
        // LIVEKIT_AVATAR_BENCH_STREAM=paced: each piece when it is due (real time) instead of all at once.
        if (PACED) await new Promise((resolve) => setTimeout(resolve, (9600 / 2 / RATE) * 1000));
      }
      await writer.close();
    })();
    // Paced, the segment is still being written when the clear comes (the worker drops the rest).
    if (!PACED) await writing;
    await holdsWithin(() => visitor.audibleMs(firstByteAt) > 800, { timeoutMs: 15_000, intervalMs: 5 });
    const firstAudible = visitor.audioLevels.find((l) => l.at >= firstByteAt && l.rms > 0.01)?.at ?? NaN;
    const firstMoving = video.find((v) => v.at >= firstByteAt && v.mouth > threshold)?.at ?? NaN;
    // The worker's own part: its first audio of the segment to the face's first speech frame
    // (before the frame pump's picture delay and libwebrtc), and the audio its output held ahead
    // of playout at its latest speech picture (what the picture delay compensates), read while
    // it speaks: after the clear below, the silenced frames of the cleared turn would read 0.
    const speaking = await sessionMetrics();
    const speechStats = { worker_audio_to_speech_frame_ms: speaking.first_audio_to_first_speech_frame_ms ?? NaN, worker_picture_lead_ms: speaking.av_offset_ms ?? NaN };

    // An interruption in the middle of the speech (the whole speech's A/V lag read first: its
    // computation between the clear's time and its sending was counted in the clear's figure).
    const speechBuffer = jitterBufferMs(speechFrom, await visitor.jitterBuffer());
    const whole = avLag(visitor.audioLevels, video, firstByteAt, Date.now());
    const clearAt = Date.now();
    await agent.localParticipant!.performRpc({ destinationIdentity: 'svc-avatar', method: 'lk.clear_buffer', payload: '' });
    await holdsWithin(() => visitor.audioLevels.some((l) => l.at > clearAt + 1000), { timeoutMs: 5_000, intervalMs: 5 });
    if (process.env.LIVEKIT_AVATAR_BENCH_VERBOSE) {
      // Each 10 ms the visitor played from 30 ms before the clear: its time (by the stream), level and zero crossings.
      const tail = visitor.audioLevels.filter((l) => l.at >= clearAt - 30 && l.at <= clearAt + 250);
      console.log(`run ${i + 1} clear tail: ${tail.map((l) => `${Math.round(visitor.playedAt(l) - clearAt)}:${Math.round(20 * Math.log10(l.rms + 1e-9))}/${crossings.get(l) ?? '?'}`).join(' ')}`);
    }
    const lastLoudLevel = visitor.audioLevels.filter((l) => l.at >= clearAt && l.at <= clearAt + 1000 && l.rms > 0.01).at(-1);
    const lastLoud = lastLoudLevel?.at;
    // Also to quiet (-26 dBFS): bench -- livekit-transport measures the transport's own floor under both.
    const lastAboveQuiet = visitor.audioLevels.filter((l) => l.at >= clearAt && l.at <= clearAt + 1000 && l.rms > 0.05).at(-1)?.at;
    rows.push({
      run: i + 1,
      join_ms: joinMs,
      first_byte_to_synced_frame_ms: firstMoving - firstByteAt,
      first_byte_to_audible_ms: firstAudible - firstByteAt,
      av_offset_ms: firstMoving - firstAudible,
      av_xcorr_ms: whole.lagMs,
      av_xcorr_r: whole.r,
      clear_to_silence_ms: lastLoud === undefined ? 0 : lastLoud + 10 - clearAt,
      // The same by the receiver's stream clock (the last loud frame's playout, not its reading).
      clear_to_silence_played_ms: lastLoudLevel === undefined ? 0 : Math.round(visitor.playedAt(lastLoudLevel) - clearAt),
      clear_to_quiet_ms: lastAboveQuiet === undefined ? 0 : lastAboveQuiet + 10 - clearAt,
      ...speechStats,
      idle_jitter_buffer_ms: Math.round(idleBuffer.delayMs),
      speech_jitter_buffer_ms: Math.round(speechBuffer.delayMs),
      speech_jitter_target_ms: Math.round(speechBuffer.targetMs),
    });
    // When the clear reached the worker (its way through the SFU): the rest of the clear's time
    // to silence is the sound already on its way to the visitor.
    const cleared = await sessionMetrics();
    rows.at(-1)!.clear_to_worker_ms = cleared.last_clear_at ? Date.parse(cleared.last_clear_at) - clearAt : NaN;
    // Times the worker's outgoing audio ran dry in the run (a gap the visitor's jitter buffer covers, and may grow for).
    rows.at(-1)!.underruns = cleared.audio_underruns ?? NaN;
    rows.at(-1)!.underrun_ms = cleared.audio_underrun_ms ?? NaN;
    await writing.catch(() => undefined); // a paced segment's last writes, after the clear
    await fetch(`${url}/v1/avatar-sessions/${session.avatar_session_id}`, { method: 'DELETE', headers: { 'X-API-Key': key } });
    await visitor.close();
    await agent.disconnect();
  }
  printTable(rows);
  const pictureLag = media.pictureLagMs === undefined ? LIVEKIT_AVATAR_WORKER_DEFAULTS.pictureLagMs : media.pictureLagMs;
  const col = (k: string) => rows.map((r) => r[k]!).filter(Number.isFinite);
  printJson('livekit_avatar', {
    runs: rows.length,
    join_p50_ms: percentile(col('join_ms'), 50),
    join_p99_ms: percentile(col('join_ms'), 99),
    first_byte_to_synced_frame_p50_ms: percentile(col('first_byte_to_synced_frame_ms'), 50),
    first_byte_to_audible_p50_ms: percentile(col('first_byte_to_audible_ms'), 50),
    worker_audio_to_speech_frame_p50_ms: percentile(col('worker_audio_to_speech_frame_ms'), 50),
    worker_picture_lead_p50_ms: percentile(col('worker_picture_lead_ms'), 50),
    av_offset_p50_ms: percentile(col('av_offset_ms'), 50),
    av_offset_max_abs_ms: Math.max(...col('av_offset_ms').map(Math.abs)),
    av_xcorr_p50_ms: percentile(col('av_xcorr_ms'), 50),
    av_xcorr_max_abs_ms: Math.max(...col('av_xcorr_ms').map(Math.abs)),
    av_xcorr_r_min: Number(Math.min(...col('av_xcorr_r')).toFixed(2)),
    clear_to_silence_p50_ms: percentile(col('clear_to_silence_ms'), 50),
    clear_to_silence_max_ms: Math.max(...col('clear_to_silence_ms')),
    clear_to_silence_played_p50_ms: percentile(col('clear_to_silence_played_ms'), 50),
    clear_to_silence_played_max_ms: Math.max(...col('clear_to_silence_played_ms')),
    clear_to_quiet_p50_ms: percentile(col('clear_to_quiet_ms'), 50),
    clear_to_worker_p50_ms: percentile(col('clear_to_worker_ms'), 50),
    idle_jitter_buffer_p50_ms: percentile(col('idle_jitter_buffer_ms'), 50),
    speech_jitter_buffer_p50_ms: percentile(col('speech_jitter_buffer_ms'), 50),
    speech_jitter_buffer_max_ms: Math.max(...col('speech_jitter_buffer_ms')),
    speech_jitter_target_p50_ms: percentile(col('speech_jitter_target_ms'), 50),
    underruns_p50: percentile(col('underruns'), 50),
    underruns_max: Math.max(...col('underruns')),
    underrun_ms_max: Math.max(...col('underrun_ms')),
    server: SERVER,
    // The frame count holds pictures back only while no picture lag times them.
    video_delay_frames: pictureLag === null ? (media.videoDelayFrames ?? LIVEKIT_AVATAR_WORKER_DEFAULTS.videoDelayFrames) : 0,
    stream: STREAM,
    speech_lead_ms: SPEECH_LEAD_MS === 'off' ? 'off' : (media.speechLeadMs ?? LIVEKIT_AVATAR_WORKER_DEFAULTS.speechLeadMs),
    picture_lag_ms: pictureLag ?? 'off',
    settle_ms: SETTLE_MS,
    undetected: rows.length * 2 - col('first_byte_to_synced_frame_ms').length - col('av_offset_ms').length,
    loadavg_1m: Number(load.toFixed(2)),
    loadavg_1m_end: Number(loadavg()[0]!.toFixed(2)),
  });
  await closeServer();
  await fake.close();
  await dispose();
  rmSync(dataDir, { recursive: true, force: true });
}
