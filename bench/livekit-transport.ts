/**
 * `npm run bench -- livekit-transport`: what the way from a LiveKit publisher to a visitor adds by
 * itself, without a face: an rtc-node publisher captures a grey picture every 40 ms and 10 ms of
 * silence every 10 ms (as the avatar worker's pump does), and once a second a white picture and a
 * 400 Hz tone at the same moment; an rtc-node visitor in the same room, through the fake LiveKit
 * server (packets forwarded in a process of its own), notes when it first sees the white picture
 * and hears the tone. Figures per step: capture to seen, capture to heard, and the difference
 * (positive: the picture after its sound), and the audio the publisher's source held ahead of
 * playout at the step (part of "heard": it is what a sound waits behind). This is the floor under `bench -- livekit-avatar`'s
 * first-byte-to-frame and A/V figures (docs/livekit-agents.md). LIVEKIT_TRANSPORT_BENCH_STEPS
 * (default 10).
 *
 * Then the floor under its clear_buffer-to-silence: LIVEKIT_TRANSPORT_BENCH_CLEARS times (default
 * 5), the tone for 400 ms, then at once the source's queue cleared (`clearQueue`, what the avatar
 * worker does on `lk.clear_buffer`) and silence captured from then on; the figure is the clear to
 * the end of the last 10 ms at the visitor above -40 dBFS (silence as bench -- livekit-avatar reads
 * it) and above -26 dBFS (quiet): the sound already past the publisher's queue (Opus, the SFU, the
 * visitor's jitter buffer and playout); `clear_to_silence_played` times the last loud frame by the
 * receiver's stream (LiveKitVisitor.playedAt) rather than by its reading; `jitter_buffer` is the
 * visitor's audio jitter buffer over each sound (mean delay per sample played). Knobs for what differs
 * from the avatar's way (each documented where it is read): _STALL_MS, _CAPTURE_MS, _LEAD_MS,
 * _SOUND, _SOUND_MS, _PUBLISHER, _ORDER, _FACE, _BURST, _BURST_PROCESS (docs/livekit-agents.md, "The clear's tail,
 * narrowed" and "Found: the agent's burst"). The load average is
 * printed: the machine is shared.
 */
import { spawn } from 'node:child_process';
import { loadavg } from 'node:os';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { AudioFrame, AudioSource, dispose, LocalAudioTrack, LocalVideoTrack, Room, TrackPublishOptions, TrackSource, VideoBufferType, VideoFrame, VideoSource } from '@livekit/rtc-node';
import { concat, resample } from '../core/audio.ts';
import { LocalTTSService } from '../plugins/local/index.ts';
import { RealClock } from '../core/clock.ts';
import { HumanFaceModel } from '../plugins/face/index.ts';
import { LIVEKIT_AVATAR_WORKER_DEFAULTS, LiveKitMediaSink } from '../transports/livekit/index.ts';
import { jitterBufferMs, LiveKitVisitor } from '../test/agent/livekit-visitor.ts';
import { startLiveKitServerFake } from '../test/fakes/livekit-server.ts';
import { until } from '../testing/until.ts';
import { choice, onOff } from './_knobs.ts';
import { livekitToken as token, writeBurst } from './_livekit.ts';
import { percentile, printJson, printTable } from './table.ts';

const STEPS = Number(process.env.LIVEKIT_TRANSPORT_BENCH_STEPS ?? 10);
const CLEARS = Number(process.env.LIVEKIT_TRANSPORT_BENCH_CLEARS ?? 5);
/** Silence as bench -- livekit-avatar reads it (10 ms under -40 dBFS RMS), and quiet (under -26 dBFS: the steps' own level). */
const SILENT_RMS = 0.01;
const QUIET_RMS = 0.05;
/** Silence captured at once after a clear (ms; LIVEKIT_TRANSPORT_BENCH_CLEAR_REFILL_MS, default 0: only the clear). */
const CLEAR_REFILL_MS = Number(process.env.LIVEKIT_TRANSPORT_BENCH_CLEAR_REFILL_MS ?? 0);
/** The audio track's Opus DTX and RED (LIVEKIT_TRANSPORT_BENCH_DTX, _RED: on or off; unset: the SDK's defaults, as the avatar worker publishes). */
const DTX = onOff('LIVEKIT_TRANSPORT_BENCH_DTX');
/**
 * A stall of the publisher's feed this long (ms) once a second, half a second after each step's moment
 * (LIVEKIT_TRANSPORT_BENCH_STALL_MS, default 0: none): its source runs dry, then the frames it
 * missed are captured at once, as the avatar worker's audio does after its process stalled. What
 * such underruns do to the visitor's jitter buffer, and so to the clear's tail, is the question.
 */
const STALL_MS = Number(process.env.LIVEKIT_TRANSPORT_BENCH_STALL_MS ?? 0);
/**
 * Audio captured this many ms at a time (LIVEKIT_TRANSPORT_BENCH_CAPTURE_MS: 10, the default, or
 * 40: four 10 ms chunks at once every 40 ms, as the avatar's frame pump delivers a face frame's sound).
 */
const CAPTURE_MS = Number(process.env.LIVEKIT_TRANSPORT_BENCH_CAPTURE_MS ?? 10);
/**
 * What is cleared (LIVEKIT_TRANSPORT_BENCH_SOUND): `tone` (default), `speech`: the offline voice's
 * phrase that bench -- livekit-avatar sends, placed so that the clear comes 900 ms into it, where
 * that bench's does (the steps keep the tone), or `speech16k`: the same made at 16 kHz and
 * resampled, as the face's audio is.
 */
const SOUND = choice('LIVEKIT_TRANSPORT_BENCH_SOUND', ['tone', 'speech', 'speech16k']);
/** How long the sound plays before it is cleared (ms; LIVEKIT_TRANSPORT_BENCH_SOUND_MS, default 300). */
const SOUND_MS = Number(process.env.LIVEKIT_TRANSPORT_BENCH_SOUND_MS ?? 300);
if (!(SOUND_MS >= 10 && SOUND_MS <= 3000)) throw new Error(`LIVEKIT_TRANSPORT_BENCH_SOUND_MS must be 10-3000, got ${process.env.LIVEKIT_TRANSPORT_BENCH_SOUND_MS}`);
/**
 * How the publisher sends (LIVEKIT_TRANSPORT_BENCH_PUBLISHER): `source` (default), straight into an
 * rtc-node AudioSource and VideoSource; `sink`, through the avatar worker's own `LiveKitMediaSink`
 * with the worker's settings (a 20 ms speech lead, pictures timed by their sound), fed 40 ms at a
 * time as its frame pump feeds it, each sound opened with `speechStarting` and cleared with
 * `clearAudio`: the avatar's way without a face.
 */
const PUBLISHER = choice('LIVEKIT_TRANSPORT_BENCH_PUBLISHER', ['source', 'sink']);
/**
 * Who comes first (LIVEKIT_TRANSPORT_BENCH_ORDER): `publisher` (default: the visitor joins a room
 * whose tracks are published already) or `visitor` (the visitor is in the room before the tracks
 * are published and subscribes as they come, as the avatar bench's visitor meets the avatar).
 */
const ORDER = choice('LIVEKIT_TRANSPORT_BENCH_ORDER', ['publisher', 'visitor']);
/**
 * LIVEKIT_TRANSPORT_BENCH_FACE=on (with _PUBLISHER=sink): a `svc/human-portrait` face session
 * renders in this process as the worker's does, its pictures are the ones sent (the white steps
 * aside), and it is given the phrase to mouth whenever a sound starts (and cancelled at the clear):
 * the avatar's way and its process's work, without the server and the agent's byte stream.
 */
const FACE = onOff('LIVEKIT_TRANSPORT_BENCH_FACE') ?? false;
if (FACE && PUBLISHER !== 'sink') throw new Error('LIVEKIT_TRANSPORT_BENCH_FACE=on needs LIVEKIT_TRANSPORT_BENCH_PUBLISHER=sink');
/**
 * LIVEKIT_TRANSPORT_BENCH_BURST=on: at each sound's start, an "agent" (a third participant, in this
 * process as the avatar bench's agent is) writes a 120 kB byte stream at once to the publisher, as
 * the avatar bench's agent writes its TTS segment to the worker: the burst's cost on the way from
 * the publisher to the visitor, without our worker. `bystander`: the same burst to a fourth
 * participant instead, so that the publisher receives nothing of it.
 */
const BURST_TO = choice('LIVEKIT_TRANSPORT_BENCH_BURST', ['off', 'on', 'bystander']);
const BURST = BURST_TO !== 'off';
/** LIVEKIT_TRANSPORT_BENCH_BURST_PROCESS=on: the agent that writes the burst runs in a process of its own (bench/_burst-agent.ts), sharing no rtc-node runtime with the visitor. */
const BURST_PROCESS = onOff('LIVEKIT_TRANSPORT_BENCH_BURST_PROCESS') ?? false;
if (BURST_PROCESS && !BURST) throw new Error('LIVEKIT_TRANSPORT_BENCH_BURST_PROCESS=on needs LIVEKIT_TRANSPORT_BENCH_BURST');
/**
 * The audio the source holds ahead of playout, set once the visitor has media
 * (LIVEKIT_TRANSPORT_BENCH_LEAD_MS: the queue is cleared and this much silence captured at once;
 * unset: whatever the start left, 20-30 ms). The avatar worker's idle face rides at 0-4 ms.
 */
const LEAD_MS = process.env.LIVEKIT_TRANSPORT_BENCH_LEAD_MS === undefined ? null : Number(process.env.LIVEKIT_TRANSPORT_BENCH_LEAD_MS);
if (LEAD_MS !== null && !(LEAD_MS >= 0 && LEAD_MS % 10 === 0)) throw new Error(`LIVEKIT_TRANSPORT_BENCH_LEAD_MS must be a multiple of 10 ms, got ${process.env.LIVEKIT_TRANSPORT_BENCH_LEAD_MS}`);
if (PUBLISHER === 'sink' && (process.env.LIVEKIT_TRANSPORT_BENCH_LEAD_MS !== undefined || process.env.LIVEKIT_TRANSPORT_BENCH_CAPTURE_MS !== undefined || CLEAR_REFILL_MS !== 0)) {
  throw new Error('LIVEKIT_TRANSPORT_BENCH_PUBLISHER=sink sets its own lead and capture (the worker\'s); _LEAD_MS, _CAPTURE_MS and _CLEAR_REFILL_MS are for the source');
}
if (CAPTURE_MS !== 10 && CAPTURE_MS !== 40) throw new Error(`LIVEKIT_TRANSPORT_BENCH_CAPTURE_MS must be 10 or 40, got ${process.env.LIVEKIT_TRANSPORT_BENCH_CAPTURE_MS}`);
if (!(STALL_MS >= 0)) throw new Error(`LIVEKIT_TRANSPORT_BENCH_STALL_MS must be a number of at least 0, got ${process.env.LIVEKIT_TRANSPORT_BENCH_STALL_MS}`);
/**
 * The pictures between steps (LIVEKIT_TRANSPORT_BENCH_PICTURES): `still` (default), one grey
 * picture, as little video traffic as there is; `moving`, a region of the lower third changing in
 * every picture (noise: more traffic than a face's motion), for the audio's way beside the video
 * traffic an avatar sends.
 */
const PICTURES = choice('LIVEKIT_TRANSPORT_BENCH_PICTURES', ['still', 'moving']);
const RED = onOff('LIVEKIT_TRANSPORT_BENCH_RED');
const AUDIO_OPTIONS = { ...(DTX === undefined ? {} : { dtx: DTX }), ...(RED === undefined ? {} : { red: RED }) };
const WIDTH = 640;
const HEIGHT = 360;
const RATE = 48_000;
const CHUNK = RATE / 100;
const TONE_HZ = 400;

async function phraseChunks(madeAt: number, rate = RATE): Promise<Int16Array[]> {
  const parts: Int16Array[] = [];
  for await (const e of new LocalTTSService().synthesize({ text: 'Welcome to the space station tour. The crew is waiting for you.', language: 'en', sampleRate: madeAt })) if (e.type === 'audio') parts.push(e.pcm);
  const pcm = madeAt === rate ? concat(parts) : resample(concat(parts), madeAt, rate);
  const chunk = rate / 100;
  return Array.from({ length: Math.floor(pcm.length / chunk) }, (_, i) => pcm.slice(i * chunk, (i + 1) * chunk));
}

function picture(luma: number, noise = false): VideoFrame {
  return new VideoFrame(pictureData(luma, noise), WIDTH, HEIGHT, VideoBufferType.I420);
}

function pictureData(luma: number, noise: boolean): Uint8Array {
  const data = new Uint8Array((WIDTH * HEIGHT * 3) / 2);
  data.fill(luma, 0, WIDTH * HEIGHT);
  data.fill(128, WIDTH * HEIGHT);
  // Noise in the lower third's middle (luma 20-99), away from the centre pixel the steps are read at.
  if (noise) for (let y = 240; y < 330; y++) for (let x = 160; x < 480; x++) data[y * WIDTH + x] = 20 + Math.floor(Math.random() * 80);
  return data;
}

export async function run(): Promise<void> {
  const fake = await startLiveKitServerFake();
  const room = 'transport-bench';
  const face = FACE ? await new HumanFaceModel('human-portrait').openSession({ imageFormat: 'i420' }, new RealClock()) : null;
  let faceImage: { width: number; height: number; data: Uint8Array } | null = null;
  const faceFrames = face?.frames.subscribe((f) => (faceImage = { width: f.image.width, height: f.image.height, data: f.image.data }));
  const mouthed = FACE ? (await phraseChunks(16_000, 16_000)).slice(0, 150) : [];
  const bystander = BURST_TO === 'bystander' ? new Room() : null;
  if (bystander) await bystander.connect(fake.url, await token(fake.apiKey, fake.apiSecret, 'bystander', room), { autoSubscribe: false, dynacast: false });
  const agent = BURST && !BURST_PROCESS ? new Room() : null;
  if (agent) await agent.connect(fake.url, await token(fake.apiKey, fake.apiSecret, 'agent', room), { autoSubscribe: false, dynacast: false });
  const agentProcess = BURST_PROCESS
    ? spawn(process.execPath, ['--import', 'tsx', fileURLToPath(new URL('./_burst-agent.ts', import.meta.url)), fake.url, await token(fake.apiKey, fake.apiSecret, 'agent', room), bystander ? 'bystander' : 'publisher'], { stdio: ['pipe', 'pipe', 'inherit'], detached: true })
    : null;
  const agentLines = agentProcess ? createInterface({ input: agentProcess.stdout! })[Symbol.asyncIterator]() : null;
  if (agentLines) {
    // Its stdout also carries the SDK's log lines: read up to its `ready`.
    let line: IteratorResult<string>;
    do line = await agentLines.next();
    while (!line.done && line.value !== 'ready');
    if (line.done) {
      process.kill(-agentProcess!.pid!, 'SIGKILL');
      throw new Error('the burst agent did not join');
    }
    // The rest of its output is read and dropped, so that it never blocks on a full pipe.
    void (async () => {
      for (let next = await agentLines.next(); !next.done; next = await agentLines.next());
    })();
  }
  const burst = async () => {
    if (agentProcess) return void agentProcess.stdin!.write('burst\n');
    await writeBurst(agent!.localParticipant!, bystander ? 'bystander' : 'publisher');
  };
  const early = ORDER === 'visitor' ? await LiveKitVisitor.join(fake.url, await token(fake.apiKey, fake.apiSecret, 'visitor', room)) : null;
  const publisher = new Room();
  await publisher.connect(fake.url, await token(fake.apiKey, fake.apiSecret, 'publisher', room), { autoSubscribe: false, dynacast: false });
  const sink =
    PUBLISHER === 'sink'
      ? new LiveKitMediaSink(
          async (track) => {
            await publisher.localParticipant!.publishTrack(track, new TrackPublishOptions({ source: TrackSource.SOURCE_CAMERA, simulcast: false }));
          },
          { audioQueueMs: LIVEKIT_AVATAR_WORKER_DEFAULTS.audioQueueMs, speechLeadMs: LIVEKIT_AVATAR_WORKER_DEFAULTS.speechLeadMs, pictureLagMs: LIVEKIT_AVATAR_WORKER_DEFAULTS.pictureLagMs },
        )
      : null;
  const audio = sink?.audioSource ?? new AudioSource(RATE, 1, 200);
  const video = sink ? null : new VideoSource(WIDTH, HEIGHT);
  await Promise.all([
    publisher.localParticipant!.publishTrack(LocalAudioTrack.createAudioTrack('audio', audio), new TrackPublishOptions({ source: TrackSource.SOURCE_MICROPHONE, ...AUDIO_OPTIONS })),
    video ? publisher.localParticipant!.publishTrack(LocalVideoTrack.createVideoTrack('video', video), new TrackPublishOptions({ source: TrackSource.SOURCE_CAMERA, simulcast: false })) : sink!.openVideo(face?.width ?? WIDTH, face?.height ?? HEIGHT),
  ]);
  const visitor = early ?? (await LiveKitVisitor.join(fake.url, await token(fake.apiKey, fake.apiSecret, 'visitor', room)));
  const seen: number[] = [];
  visitor.onVideoFrame = (frame, at) => {
    // The centre pixel's luma: white pictures are the steps.
    if (frame.data[(frame.height >> 1) * frame.width + (frame.width >> 1)]! > 200) seen.push(at);
  };
  const greys = PICTURES === 'moving' ? Array.from({ length: 16 }, () => picture(60, true)) : [picture(60)];
  const white = picture(235);
  // The same pictures as I420 for the sink (it makes its own VideoFrames).
  const rawGreys = greys.map((g) => ({ width: WIDTH, height: HEIGHT, data: g.data }));
  const rawWhite = { width: WIDTH, height: HEIGHT, data: white.data };
  /** Sink mode: the 40 ms being gathered (its picture and chunks) and whether a sound opens in it. */
  let batch: { picture: { width: number; height: number; data: Uint8Array } | null; chunks: Int16Array[]; opens: boolean } = { picture: null, chunks: [], opens: false };
  let sounding = false;
  const silence = new Int16Array(CHUNK);
  // 400 Hz: a whole number of cycles (4) in each 10 ms chunk, so the chunks join without a step
  // and the tone carries no DC. The 440 Hz chunk it replaces (4.4 cycles, restarting each chunk)
  // had a mean of 778 (-32 dBFS): the Opus encoder's DC-reject filter (3 Hz) passed that step into
  // a tail decaying over some 100 ms at the visitor after the tone stopped, read as the transport's
  // clear floor until 2026-12-01 (docs/livekit-agents.md).
  const tone = Int16Array.from({ length: CHUNK }, (_, i) => Math.round(12_000 * Math.sin((2 * Math.PI * TONE_HZ * i) / RATE)));
  const rows: Array<Record<string, number>> = [];
  const clears: Array<Record<string, number>> = [];
  let running = true;
  let stepAt = 0;
  let toneLeft = 0;
  /** Audio the publisher's source held ahead of playout when the step was captured (part of "heard"). */
  let queuedAtStep = 0;
  // The publisher's clock: a picture every 40 ms, 10 ms of audio every 10 ms, as the avatar's pump.
  /** The phrase in 10 ms chunks (SOUND speech), and the next chunk to send. */
  const speech = SOUND === 'tone' ? null : await phraseChunks(SOUND === 'speech16k' ? 16_000 : RATE);
  let speechAt = 0;
  const started = Date.now();
  let ticks = 0;
  /** Steps are taken while true; the clears run after them. */
  let stepping = true;
  /** Set to ask the feed for a clear at its next tick; the feed writes when it cleared. */
  let clearRequested = false;
  /** Set to have the feed set the source's lead (LEAD_MS) at its next tick. */
  let leadRequested = false;
  let clearedAt = 0;
  const feed = (async () => {
    while (running) {
      const now = Date.now();
      if (leadRequested) {
        leadRequested = false;
        audio.clearQueue();
        for (let ms = 0; ms < (LEAD_MS ?? 0); ms += 10) await audio.captureFrame(new AudioFrame(silence, RATE, 1, CHUNK));
      }
      if (clearRequested) {
        // Between captures, as the worker's clear comes between its pump's deliveries.
        clearRequested = false;
        if (sink) {
          // The chunks gathered for the next delivery are the cleared sound's too.
          face?.cancel();
          sink.clearAudio();
          batch.chunks = batch.chunks.map(() => silence);
        } else audio.clearQueue();
        toneLeft = 0;
        clearedAt = Date.now();
        for (let ms = 0; ms < CLEAR_REFILL_MS; ms += 10) await audio.captureFrame(new AudioFrame(silence, RATE, 1, CHUNK));
      }
      if (stepping && stepAt === 0 && ticks > 0 && ticks % 100 === 0) {
        stepAt = now;
        queuedAtStep = sink ? sink.audioAheadMs : audio.queuedDuration;
        toneLeft = 20;
      }
      if (STALL_MS > 0 && ticks % 100 === 50) {
        // Only the feed waits: the visitor, here in the same process, stands for another machine.
        await new Promise((resolve) => setTimeout(resolve, STALL_MS));
      }
      const white40 = stepAt !== 0 && now - stepAt < 40;
      const sound = stepping || !speech ? tone : (speech[speechAt++] ?? silence);
      const chunk = toneLeft-- > 0 ? sound : silence;
      if (sink) {
        if (ticks % 4 === 0) batch.picture = white40 ? rawWhite : (faceImage ?? rawGreys[(ticks / 4) % rawGreys.length]!);
        if (chunk !== silence && !sounding) {
          batch.opens = true;
          if (face) for (const piece of mouthed) face.pushAudio(piece);
        }
        sounding = chunk !== silence;
        batch.chunks.push(chunk);
        ticks++;
        if (ticks % 4 !== 0) continue;
        const { picture: shown, chunks, opens } = batch;
        batch = { picture: null, chunks: [], opens: false };
        if (opens) await sink.speechStarting();
        await sink.deliver(shown, chunks);
      } else {
        if (ticks % 4 === 0) video!.captureFrame(white40 ? white : greys[(ticks / 4) % greys.length]!);
        await audio.captureFrame(new AudioFrame(chunk, RATE, 1, CHUNK));
        ticks++;
        if (ticks % (CAPTURE_MS / 10) !== 0) continue;
      }
      const ahead = started + ticks * 10 - Date.now();
      if (ahead > 0) await new Promise((resolve) => setTimeout(resolve, ahead));
    }
  })();
  try {
    await until(() => visitor.videoFrames > 25 && visitor.audioLevels.length > 100, { timeoutMs: 30_000, what: 'media at the visitor' });
    if (LEAD_MS !== null) {
      leadRequested = true;
      await until(() => !leadRequested, { timeoutMs: 5_000, what: 'the lead set' });
      await new Promise((resolve) => setTimeout(resolve, 2000)); // the visitor's jitter buffer adapts to it
    }
    stepAt = 0; // a step taken while the visitor was still joining is not one
    for (let i = 0; i < STEPS; i++) {
      await until(() => stepAt !== 0, { timeoutMs: 5_000, what: 'a step' });
      const at = stepAt;
      await until(() => Date.now() - at > 800, { timeoutMs: 5_000, intervalMs: 20, what: 'the step to arrive' });
      const seenAt = seen.find((s) => s >= at);
      const heardAt = visitor.audioLevels.find((l) => l.at >= at && l.rms > 0.05)?.at;
      rows.push({ step: i + 1, capture_to_seen_ms: seenAt === undefined ? NaN : seenAt - at, capture_to_heard_ms: heardAt === undefined ? NaN : heardAt - at, av_ms: seenAt === undefined || heardAt === undefined ? NaN : seenAt - heardAt, publisher_queued_ms: queuedAtStep });
      stepAt = 0;
    }
    stepping = false;
    for (let i = 0; i < CLEARS; i++) {
      await new Promise((resolve) => setTimeout(resolve, 400));
      const bufferFrom = await visitor.jitterBuffer();
      if (BURST) void burst().catch(() => undefined);
      speechAt = Math.max(0, 90 - SOUND_MS / 10);
      toneLeft = SOUND_MS / 10 + 10; // the tone (or speech) for SOUND_MS and 100 ms more, cleared after SOUND_MS
      await new Promise((resolve) => setTimeout(resolve, SOUND_MS));
      // The visitor's jitter buffer over the sound (the clear's tail waits through it).
      const buffer = jitterBufferMs(bufferFrom, await visitor.jitterBuffer());
      clearedAt = 0;
      clearRequested = true;
      await until(() => clearedAt !== 0, { timeoutMs: 5_000, what: 'the clear' });
      const at = clearedAt;
      await until(() => Date.now() - at > 800, { timeoutMs: 5_000, intervalMs: 20, what: 'the clear to arrive' });
      // The end of the last 10 ms above a level; a clear whose tone never reached the visitor measures nothing.
      const after = (rms: number) => {
        const last = visitor.audioLevels.filter((l) => l.at >= at - 300 && l.at <= at + 800 && l.rms > rms).at(-1)?.at;
        return last === undefined ? NaN : Math.max(0, last + 10 - at);
      };
      // The same by the receiver's stream clock (the last loud frame's playout, not its reading).
      const lastLoud = visitor.audioLevels.filter((l) => l.at >= at - 300 && l.at <= at + 800 && l.rms > SILENT_RMS).at(-1);
      const played = lastLoud === undefined ? NaN : Math.max(0, Math.round(visitor.playedAt(lastLoud) - at));
      clears.push({ clear: i + 1, clear_to_silence_ms: after(SILENT_RMS), clear_to_quiet_ms: after(QUIET_RMS), clear_to_silence_played_ms: played, jitter_buffer_ms: Math.round(buffer.delayMs), jitter_target_ms: Math.round(buffer.targetMs) });
    }
  } finally {
    running = false;
    await feed.catch(() => undefined);
    await visitor.close();
    await sink?.close();
    await agent?.disconnect();
    if (agentProcess) {
      agentProcess.stdin!.end();
      await new Promise((resolve) => setTimeout(resolve, 500));
      try {
        process.kill(-agentProcess.pid!, 'SIGKILL'); // its whole group
      } catch {
        // gone already
      }
    }
    await bystander?.disconnect();
    faceFrames?.unsubscribe();
    face?.close();
    await publisher.disconnect();
    await fake.close();
    await dispose();
  }
  printTable(rows);
  printTable(clears);
  const col = (k: string) => rows.map((r) => r[k]!).filter(Number.isFinite);
  const cleared = (k: string) => clears.map((r) => r[k]!).filter(Number.isFinite);
  printJson('livekit_transport', {
    steps: rows.length,
    capture_to_seen_p50_ms: percentile(col('capture_to_seen_ms'), 50),
    capture_to_seen_max_ms: Math.max(...col('capture_to_seen_ms')),
    capture_to_heard_p50_ms: percentile(col('capture_to_heard_ms'), 50),
    capture_to_heard_max_ms: Math.max(...col('capture_to_heard_ms')),
    av_p50_ms: percentile(col('av_ms'), 50),
    publisher_queued_p50_ms: percentile(col('publisher_queued_ms'), 50),
    clears: clears.length,
    clear_to_silence_p50_ms: percentile(cleared('clear_to_silence_ms'), 50),
    clear_to_silence_max_ms: Math.max(...cleared('clear_to_silence_ms')),
    clear_to_quiet_p50_ms: percentile(cleared('clear_to_quiet_ms'), 50),
    clear_to_silence_played_p50_ms: percentile(cleared('clear_to_silence_played_ms'), 50),
    jitter_buffer_p50_ms: percentile(cleared('jitter_buffer_ms'), 50),
    jitter_buffer_max_ms: Math.max(...cleared('jitter_buffer_ms')),
    clear_refill_ms: CLEAR_REFILL_MS,
    stall_ms: STALL_MS,
    capture_ms: PUBLISHER === 'sink' ? 40 : CAPTURE_MS,
    // The sink's is the worker's speech lead; the source's is LEAD_MS, or what its start left.
    lead_ms: PUBLISHER === 'sink' ? LIVEKIT_AVATAR_WORKER_DEFAULTS.speechLeadMs : (LEAD_MS ?? 'start'),
    sound: SOUND,
    publisher: PUBLISHER,
    order: ORDER,
    face: FACE,
    burst: BURST_TO,
    burst_process: BURST_PROCESS,
    sound_ms: SOUND_MS,
    dtx: DTX === undefined ? 'default' : DTX,
    red: RED === undefined ? 'default' : RED,
    pictures: PICTURES,
    missed: rows.length * 2 - col('capture_to_seen_ms').length - col('capture_to_heard_ms').length + clears.length - cleared('clear_to_silence_ms').length,
    loadavg_1m: Number(loadavg()[0]!.toFixed(2)),
  });
}
