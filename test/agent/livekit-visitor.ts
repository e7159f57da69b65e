/**
 * A headless visitor for sessions in LiveKit rooms, the LiveKit twin of room-visitor.ts: joins
 * with the Session's `room_url` and `token` using the real @livekit/rtc-node SDK, publishes a
 * microphone fed in real time (queued speech, else silence, as a real microphone), reads the
 * avatar's audio (AudioStream) and video (VideoStream, converted to I420 so the luma plane can be
 * compared), and speaks and reads session messages as data packets on the `session` topic.
 */
import {
  AudioFrame,
  AudioSource,
  AudioStream,
  LocalAudioTrack,
  Room,
  RoomEvent,
  TrackKind,
  TrackPublishOptions,
  TrackSource,
  VideoBufferType,
  VideoStream,
  type RemoteTrack,
} from '@livekit/rtc-node';
import { chunkAudio, rms } from '../../core/audio.ts';
import { LIVEKIT_SESSION_TOPIC } from '../../transports/livekit/livekit-bot-room.ts';
import type { VisitorMessage } from './room-visitor.ts';

const MIC_RATE = 16_000;
const CHUNK = MIC_RATE / 100; // 10 ms
const LOUD_SPEECH = 0.02;

/** A reading of `LiveKitVisitor.jitterBuffer`. */
export interface JitterBufferReading {
  delaySeconds: number;
  targetSeconds: number;
  emitted: number;
}

/** The jitter buffer's mean delay and target between two readings (ms; NaN without both, or with no sample played between). */
export function jitterBufferMs(from: JitterBufferReading | undefined, to: JitterBufferReading | undefined): { delayMs: number; targetMs: number } {
  const samples = from && to ? to.emitted - from.emitted : 0;
  if (!from || !to || samples <= 0) return { delayMs: NaN, targetMs: NaN };
  return { delayMs: ((to.delaySeconds - from.delaySeconds) / samples) * 1000, targetMs: ((to.targetSeconds - from.targetSeconds) / samples) * 1000 };
}

export class LiveKitVisitor {
  readonly messages: VisitorMessage[] = [];
  /** Data packets on other topics or not JSON (should stay empty). */
  readonly otherPackets: string[] = [];
  videoFrames = 0;
  videoSize: { width: number; height: number } | null = null;
  lastLoudSentAt = 0;
  /**
   * Each audio frame read: when this process read it (`at`, later than it was played whenever
   * this process was busy), its level, and where it ends in the stream (`endMs`: ms of audio read
   * up to its end), from which `playedAt` tells when it was made, free of this process's delays.
   */
  readonly audioLevels: { at: number; rms: number; endMs: number }[] = [];
  private audioReadMs = 0;
  /** Identities of the participants whose tracks were subscribed. */
  readonly trackOwners = new Set<string>();
  onVideoFrame?: (frame: { width: number; height: number; data: Uint8Array }, at: number) => void;
  onAudio?: (samples: Int16Array, sampleRate: number, channels: number, at: number) => void;
  private readonly room = new Room();
  private readonly mic = new AudioSource(MIC_RATE, 1, 100);
  private readonly speech: Int16Array[] = [];
  private readonly readers: Promise<void>[] = [];
  private readonly streams: Array<{ cancel(): Promise<void> }> = [];
  private pump: Promise<void> | undefined;
  private closed = false;

  private constructor() {}

  static async join(url: string, token: string): Promise<LiveKitVisitor> {
    const visitor = new LiveKitVisitor();
    try {
      await visitor.connect(url, token);
    } catch (error) {
      // As RoomVisitor: a join that failed leaves no room connection or audio source behind.
      await visitor.close();
      throw error;
    }
    return visitor;
  }

  /** The room's name (what the release endpoint takes). */
  get roomName(): string {
    return this.room.name ?? '';
  }

  get identity(): string {
    return this.room.localParticipant?.identity ?? '';
  }

  /** Whether the SDK still holds the connection (false after the server deleted the room). */
  get connected(): boolean {
    return this.room.isConnected;
  }

  private async connect(url: string, token: string): Promise<void> {
    this.room
      .on(RoomEvent.TrackSubscribed, (track, _publication, participant) => {
        this.trackOwners.add(participant.identity);
        this.readers.push(track.kind === TrackKind.KIND_VIDEO ? this.readVideo(track) : this.readAudio(track));
      })
      .on(RoomEvent.DataReceived, (payload, _participant, _kind, topic) => {
        const text = new TextDecoder().decode(payload);
        if (topic !== LIVEKIT_SESSION_TOPIC) return void this.otherPackets.push(`${topic}: ${text}`);
        try {
          this.messages.push({ at: Date.now(), message: JSON.parse(text) as Record<string, unknown> });
        } catch {
          this.otherPackets.push(text);
        }
      });
    await this.room.connect(url, token, { autoSubscribe: true, dynacast: false });
    const track = LocalAudioTrack.createAudioTrack('microphone', this.mic);
    await this.room.localParticipant!.publishTrack(track, new TrackPublishOptions({ source: TrackSource.SOURCE_MICROPHONE }));
    this.pump = this.feedMicrophone();
  }

  /** The microphone in real time: queued speech, else silence, 10 ms at a time. */
  private async feedMicrophone(): Promise<void> {
    const started = Date.now();
    let sent = 0;
    while (!this.closed) {
      const next = this.speech.shift() ?? new Int16Array(CHUNK);
      if (rms(next) > LOUD_SPEECH) this.lastLoudSentAt = Date.now();
      await this.mic.captureFrame(new AudioFrame(next, MIC_RATE, 1, CHUNK)).catch(() => undefined);
      sent++;
      const ahead = sent * 10 - (Date.now() - started);
      if (ahead > 0) await new Promise((resolve) => setTimeout(resolve, ahead));
    }
  }

  private async readAudio(track: RemoteTrack): Promise<void> {
    const reader = new AudioStream(track, { sampleRate: 48_000, numChannels: 1 }).getReader();
    this.streams.push(reader);
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done || this.closed) break;
        const at = Date.now();
        this.audioReadMs += (value.samplesPerChannel / value.sampleRate) * 1000;
        this.audioLevels.push({ at, rms: rms(value.data), endMs: this.audioReadMs });
        this.onAudio?.(value.data, value.sampleRate, value.channels, at);
      }
    } catch {
      // the track ended
    } finally {
      reader.releaseLock();
    }
  }

  private async readVideo(track: RemoteTrack): Promise<void> {
    const reader = new VideoStream(track).getReader();
    this.streams.push(reader);
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done || this.closed) break;
        const frame = value.frame.type === VideoBufferType.I420 ? value.frame : value.frame.convert(VideoBufferType.I420);
        this.videoFrames++;
        this.videoSize = { width: frame.width, height: frame.height };
        this.onVideoFrame?.({ width: frame.width, height: frame.height, data: frame.data }, Date.now());
      }
    } catch {
      // the track ended
    } finally {
      reader.releaseLock();
    }
  }

  /** A session protocol message to the bot (reliable, `session` topic). */
  async sendMessage(message: Record<string, unknown>): Promise<void> {
    await this.room.localParticipant!.publishData(new TextEncoder().encode(JSON.stringify(message)), { reliable: true, topic: LIVEKIT_SESSION_TOPIC });
  }

  /** Queues 16 kHz mono speech on the microphone (played in real time). */
  say(pcm: Int16Array): void {
    for (const c of chunkAudio(pcm, MIC_RATE, 10)) {
      const chunk = new Int16Array(CHUNK);
      chunk.set(c);
      this.speech.push(chunk);
    }
  }

  ofType(type: string): Record<string, unknown>[] {
    return this.messages.filter((m) => m.message.type === type).map((m) => m.message);
  }

  /**
   * When `level`'s frame was made by the receiver (its playout), on this process's clock. The
   * receiver makes 10 ms of audio every 10 ms without a break, and a frame is read no sooner than
   * it was made: the least delayed reading of the frames within `windowMs` of it (each read time
   * less its stream position) dates the stream, and the frame is its stream position after that.
   * A reading delayed by this process (a stall, a burst of video to decode) no longer delays the
   * figure; a break in the stream (none is expected) would make it early by the break.
   */
  playedAt(level: { at: number; endMs: number }, windowMs = 1000): number {
    let origin = Infinity;
    for (const l of this.audioLevels) if (Math.abs(l.at - level.at) <= windowMs) origin = Math.min(origin, l.at - l.endMs);
    return origin + level.endMs;
  }

  /**
   * The received audio's jitter buffer so far, from libwebrtc's inbound-rtp statistics (the
   * audio track with the most samples played, when there are several): the buffer's delay and its
   * target summed over the samples played (seconds), and the samples played. The mean over an
   * interval is the difference of two readings (`jitterBufferMs`). Undefined before audio comes.
   */
  async jitterBuffer(): Promise<JitterBufferReading | undefined> {
    const stats = await this.room.getRtcStats();
    let best: JitterBufferReading | undefined;
    for (const s of stats.subscriberStats) {
      if (s.stats.case !== 'inboundRtp' || s.stats.value.stream?.kind !== 'audio') continue;
      const inbound = s.stats.value.inbound;
      const emitted = Number(inbound?.jitterBufferEmittedCount ?? 0);
      if (!inbound || emitted <= (best?.emitted ?? 0)) continue;
      best = { delaySeconds: inbound.jitterBufferDelay ?? 0, targetSeconds: inbound.jitterBufferTargetDelay ?? 0, emitted };
    }
    return best;
  }

  /** Milliseconds of received audio louder than `threshold` (RMS), since `since`. */
  audibleMs(since = 0, threshold = 0.01): number {
    return this.audioLevels.filter((l) => l.at >= since && l.rms > threshold).length * 10;
  }

  /**
   * Leaves the room and stops the microphone and the readers. Each step is bounded: after the
   * server deleted the room, the SDK's audio source may never take another frame.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const bounded = async (p: Promise<unknown>) => {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([p.catch(() => undefined), new Promise((resolve) => (timer = setTimeout(resolve, 3000)))]);
      clearTimeout(timer);
    };
    await bounded(this.room.disconnect());
    await bounded(this.mic.close());
    await bounded(this.pump ?? Promise.resolve());
    for (const reader of this.streams) await bounded(reader.cancel());
    await bounded(Promise.allSettled(this.readers));
  }
}
