/**
 * Feeds converted face frames into LiveKit media sources (@livekit/rtc-node): 10 ms AudioFrames
 * of 48 kHz mono into an AudioSource, I420 VideoFrames into a VideoSource. The video source and
 * its track are created on the first picture, when its size is known. Kept apart from the room
 * connection so the conversions run (and are tested) without a LiveKit server.
 */
import { AudioFrame, AudioSource, LocalVideoTrack, VideoBufferType, VideoFrame, VideoSource } from '@livekit/rtc-node';
import { AVATAR_MEDIA, i420ByteLength, type I420Frame } from '../webrtc/avatar-media.ts';
import type { AvatarMediaSink } from '../webrtc/avatar-frame-pump.ts';
import { RealClock, type Clock, type TimerHandle } from '../../core/clock.ts';

export const LIVEKIT_MEDIA_DEFAULTS = {
  /** Audio the AudioSource may hold ahead of playout; capture waits when it is full. */
  audioQueueMs: 200,
  /**
   * Pictures a sink that times them (`pictureLagMs`) may hold back at most; beyond this the oldest
   * goes out at once (in order). 10 frames (400 ms) is more than the audio queue can hold.
   */
  maxHeldPictures: 10,
  /** A gap in the audio sent shorter than this (ms) is not counted as an underrun: the queue's estimate is only that precise. */
  underrunToleranceMs: 2,
  videoTrackName: 'avatar-video',
  audioTrackName: 'avatar-audio',
} as const;

export function toLiveKitVideoFrame(frame: I420Frame): VideoFrame {
  if (frame.data.byteLength !== i420ByteLength(frame.width, frame.height)) throw new RangeError(`i420 frame of ${frame.width}x${frame.height} has ${frame.data.byteLength} bytes`);
  return new VideoFrame(frame.data, frame.width, frame.height, VideoBufferType.I420);
}

export function toLiveKitAudioFrame(chunk: Int16Array, sampleRate: number = AVATAR_MEDIA.audioSampleRate): AudioFrame {
  return new AudioFrame(chunk, sampleRate, 1, chunk.length);
}

const CHUNK_MS = 10;

export interface LiveKitMediaSinkOptions {
  /** Audio the AudioSource may hold ahead of playout (ms; `LIVEKIT_MEDIA_DEFAULTS.audioQueueMs`). */
  readonly audioQueueMs?: number;
  /**
   * When set, a turn's speech does not wait behind queued silence: at its start the silence is
   * dropped down to this much (a lead against late frames; a frame later than its lead is a gap
   * in the sound). Whole 10 ms chunks; null (the default) keeps the queue as it is.
   */
  readonly speechLeadMs?: number | null;
  /**
   * When set, each picture goes to the video source when the audio delivered with it is sent (the
   * audio queued ahead of it has drained) plus this lag (ms), instead of at once: the picture keeps
   * its place against its own sound however full the audio queue is. Null (the default): at once
   * (a frame pump's `videoDelayFrames` may hold pictures back by a count instead).
   */
  readonly pictureLagMs?: number | null;
  /**
   * The time of the sink's own decisions (when a held picture goes, what counts as an underrun):
   * it keeps its estimate of the audio queued ahead on this clock, from its captures, as the SDK's
   * `queuedDuration` is kept. Default: real time.
   */
  readonly clock?: Clock;
}

/** What the sink measured of its own timing. */
export interface LiveKitMediaSinkStats {
  /**
   * Times the audio source ran dry before the next audio came (a gap in the sound sent, which the
   * receiver's jitter buffer must cover), and their total length (ms). A clear's empty queue is
   * not one. Estimated from the capture times, as the SDK's `queuedDuration` is.
   */
  underruns: number;
  underrunMs: number;
  /** Pictures held back to their sound's time (`pictureLagMs`), and those that went out early because too many were held. */
  picturesHeld: number;
  picturesForced: number;
  /** Pictures dropped held, their sound cleared (`clearAudio`). */
  picturesDropped: number;
  /**
   * How much sooner the latest picture went out than its sound (ms; negative: after it): the
   * audio queued ahead of it at its delivery less the time it was held. Null before a picture.
   */
  lastPictureLeadMs: number | null;
}

interface HeldPicture {
  readonly frame: VideoFrame;
  soundAt: number;
  dueAt: number;
}

export class LiveKitMediaSink implements AvatarMediaSink {
  readonly audioSource: AudioSource;
  /** Queued silence dropped when speech started (ms, in all). */
  droppedSilenceMs = 0;
  readonly stats: LiveKitMediaSinkStats = { underruns: 0, underrunMs: 0, picturesHeld: 0, picturesForced: 0, picturesDropped: 0, lastPictureLeadMs: null };
  /** The clock's time at which the audio captured so far has all been sent; null before any audio, and after a clear. */
  private audioEndsAt: number | null = null;
  private readonly held: HeldPicture[] = [];
  private heldTimer: TimerHandle | undefined;
  private closed = false;
  private readonly pictureLagMs: number | null;
  private readonly clock: Clock;
  private videoSource: VideoSource | undefined;
  private videoSize = { width: 0, height: 0 };
  /** How much of the audio captured last was silence (ms): the queue holds only silence while it is at most this. */
  private silentTailMs = 0;
  /** The lead in whole 10 ms chunks; null: queued silence is kept (and no chunk is scanned). */
  private readonly speechLeadMs: number | null;

  /**
   * @param onVideoTrack called once with the video track when the first picture arrives (the
   *   publisher publishes it); the sink keeps feeding the source meanwhile.
   */
  constructor(
    private readonly onVideoTrack: (track: LocalVideoTrack) => Promise<void> | void,
    options: LiveKitMediaSinkOptions = {},
  ) {
    this.audioSource = new AudioSource(AVATAR_MEDIA.audioSampleRate, 1, options.audioQueueMs ?? LIVEKIT_MEDIA_DEFAULTS.audioQueueMs);
    const lead = options.speechLeadMs ?? null;
    this.speechLeadMs = lead === null ? null : Math.max(0, Math.ceil(lead / CHUNK_MS)) * CHUNK_MS;
    this.pictureLagMs = options.pictureLagMs ?? null;
    this.clock = options.clock ?? new RealClock();
  }

  /** Audio queued in the source ahead of playout: the frame pump keeps pictures while it is full. */
  get audioAheadMs(): number {
    return this.audioSource.queuedDuration;
  }

  get video(): VideoSource | undefined {
    return this.videoSource;
  }

  /**
   * Creates the video source and its track now, for a picture size known in advance (the face
   * session's): the track is then published with the audio, in the first negotiation, instead of
   * a renegotiation when the first picture comes.
   */
  async openVideo(width: number, height: number): Promise<void> {
    if (this.videoSource) return;
    this.videoSource = new VideoSource(width, height);
    this.videoSize = { width, height };
    await this.onVideoTrack(LocalVideoTrack.createVideoTrack(LIVEKIT_MEDIA_DEFAULTS.videoTrackName, this.videoSource));
  }

  async deliver(video: I420Frame | null, audio: readonly Int16Array[]): Promise<void> {
    if (video) {
      if (!this.videoSource) {
        this.videoSource = new VideoSource(video.width, video.height);
        this.videoSize = { width: video.width, height: video.height };
        await this.onVideoTrack(LocalVideoTrack.createVideoTrack(LIVEKIT_MEDIA_DEFAULTS.videoTrackName, this.videoSource));
      }
      this.takePicture(toLiveKitVideoFrame(video));
    }
    for (const chunk of audio) {
      const chunkMs = (chunk.length / AVATAR_MEDIA.audioSampleRate) * 1000;
      if (this.speechLeadMs !== null) this.silentTailMs = chunk.every((sample) => sample === 0) ? this.silentTailMs + chunkMs : 0;
      this.countAudio(chunkMs);
      await this.audioSource.captureFrame(toLiveKitAudioFrame(chunk));
    }
  }

  /** Keeps the estimate of when the audio captured so far is all sent, and counts the gaps. */
  private countAudio(chunkMs: number): void {
    const now = this.clock.now();
    if (this.audioEndsAt !== null && now - this.audioEndsAt > LIVEKIT_MEDIA_DEFAULTS.underrunToleranceMs) {
      this.stats.underruns++;
      this.stats.underrunMs += now - this.audioEndsAt;
    }
    this.audioEndsAt = Math.max(this.audioEndsAt ?? now, now) + chunkMs;
  }

  /** A picture to the video source: at once, or (`pictureLagMs`) when its sound is sent. */
  private takePicture(frame: VideoFrame): void {
    const now = this.clock.now();
    const soundAt = Math.max(now, this.audioEndsAt ?? now);
    if (this.pictureLagMs === null) {
      this.capture({ frame, soundAt, dueAt: now }, now);
      return;
    }
    // Never before a picture already held: pictures keep their order.
    const dueAt = Math.max(soundAt + this.pictureLagMs, this.held.at(-1)?.dueAt ?? 0);
    if (dueAt <= now && this.held.length === 0) {
      this.capture({ frame, soundAt, dueAt }, now);
      return;
    }
    const head = this.held[0];
    this.stats.picturesHeld++;
    this.held.push({ frame, soundAt, dueAt });
    while (this.held.length > LIVEKIT_MEDIA_DEFAULTS.maxHeldPictures) {
      this.stats.picturesForced++;
      this.capture(this.held.shift()!, now);
    }
    // The timer waits for the first held picture: only a new first one needs it set again.
    if (this.held[0] !== head) this.armHeld();
  }

  private armHeld(): void {
    this.clock.clearTimeout(this.heldTimer);
    this.heldTimer = undefined;
    const next = this.held[0];
    if (!next || this.closed) return;
    this.heldTimer = this.clock.setTimeout(() => {
      this.heldTimer = undefined;
      const now = this.clock.now();
      // Timers fire up to a millisecond early (rounding): a picture within 1 ms of its time goes.
      while (this.held.length > 0 && this.held[0]!.dueAt <= now + 1) this.capture(this.held.shift()!, now);
      this.armHeld();
    }, Math.max(0, next.dueAt - this.clock.now()));
  }

  private capture(picture: HeldPicture, now: number): void {
    if (this.closed || !this.videoSource) return;
    this.stats.lastPictureLeadMs = picture.soundAt - now;
    // A source keeps its first size as its resolution hint; later sizes still encode correctly.
    this.videoSource.captureFrame(picture.frame);
  }

  /** Pictures waiting for their sound's time (`pictureLagMs`). */
  get heldPictures(): number {
    return this.held.length;
  }

  /**
   * A turn's speech comes next: the silence queued ahead of it (idle frames' audio not yet sent)
   * is dropped down to the lead, so the speech is sent that much sooner. Only when all that is
   * queued is silence: the end of a turn just before still plays whole.
   */
  async speechStarting(): Promise<void> {
    const lead = this.speechLeadMs;
    if (lead === null) return;
    // The sink's own estimate (on its clock), the one its held pictures are timed by.
    const queued = this.audioEndsAt === null ? 0 : Math.max(0, this.audioEndsAt - this.clock.now());
    if (queued <= lead || queued > this.silentTailMs) return;
    this.audioSource.clearQueue();
    this.audioEndsAt = this.clock.now();
    // The pictures held for the dropped silence come that much sooner, as their sound does.
    for (const picture of this.held) {
      picture.soundAt -= queued - lead;
      picture.dueAt -= queued - lead;
    }
    this.armHeld();
    for (let ms = 0; ms < lead; ms += CHUNK_MS) {
      this.countAudio(CHUNK_MS);
      await this.audioSource.captureFrame(toLiveKitAudioFrame(new Int16Array((AVATAR_MEDIA.audioSampleRate / 1000) * CHUNK_MS)));
    }
    this.droppedSilenceMs += queued - lead;
    this.silentTailMs = lead;
  }

  /**
   * Drops the sound queued (an `lk.clear_buffer`), and the pictures held for it; returns how much
   * sound was dropped (ms).
   */
  clearAudio(): number {
    const dropped = this.audioSource.queuedDuration;
    this.audioSource.clearQueue();
    this.silentTailMs = 0;
    this.audioEndsAt = null;
    this.stats.picturesDropped += this.held.length;
    this.held.length = 0;
    this.armHeld();
    return dropped;
  }

  get size(): { readonly width: number; readonly height: number } {
    return this.videoSize;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.held.length = 0;
    this.armHeld();
    await Promise.allSettled([this.audioSource.close(), this.videoSource?.close()]);
  }
}
