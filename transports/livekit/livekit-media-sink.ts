/**
 * Feeds converted face frames into LiveKit media sources (@livekit/rtc-node): 10 ms AudioFrames
 * of 48 kHz mono into an AudioSource, I420 VideoFrames into a VideoSource. The video source and
 * its track are created on the first picture, when its size is known. Kept apart from the room
 * connection so the conversions run (and are tested) without a LiveKit server.
 */
import { AudioFrame, AudioSource, LocalVideoTrack, VideoBufferType, VideoFrame, VideoSource } from '@livekit/rtc-node';
import { AVATAR_MEDIA, i420ByteLength, type I420Frame } from '../webrtc/avatar-media.ts';
import type { AvatarMediaSink } from '../webrtc/avatar-frame-pump.ts';

export const LIVEKIT_MEDIA_DEFAULTS = {
  /** Audio the AudioSource may hold ahead of playout; capture waits when it is full. */
  audioQueueMs: 200,
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

export class LiveKitMediaSink implements AvatarMediaSink {
  readonly audioSource: AudioSource;
  /** Queued silence dropped when speech started (ms, in all). */
  droppedSilenceMs = 0;
  private videoSource: VideoSource | undefined;
  private videoSize = { width: 0, height: 0 };
  /** How much of the audio captured last was silence (ms): the queue holds only silence while it is at most this. */
  private silentTailMs = 0;
  /** The lead in whole 10 ms chunks; null: queued silence is kept (and no chunk is scanned). */
  private readonly speechLeadMs: number | null;

  /**
   * @param onVideoTrack called once with the video track when the first picture arrives (the
   *   publisher publishes it); the sink keeps feeding the source meanwhile.
   * @param speechLeadMs when set, a turn's speech does not wait behind queued silence: at its
   *   start the silence is dropped down to this much (a lead against late frames; a frame later
   *   than its lead is a gap in the sound). Whole 10 ms chunks; null keeps the queue as it is.
   */
  constructor(
    private readonly onVideoTrack: (track: LocalVideoTrack) => Promise<void> | void,
    audioQueueMs: number = LIVEKIT_MEDIA_DEFAULTS.audioQueueMs,
    speechLeadMs: number | null = null,
  ) {
    this.audioSource = new AudioSource(AVATAR_MEDIA.audioSampleRate, 1, audioQueueMs);
    this.speechLeadMs = speechLeadMs === null ? null : Math.max(0, Math.ceil(speechLeadMs / CHUNK_MS)) * CHUNK_MS;
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
      // A source keeps its first size as its resolution hint; later sizes still encode correctly.
      this.videoSource.captureFrame(toLiveKitVideoFrame(video));
    }
    for (const chunk of audio) {
      if (this.speechLeadMs !== null) this.silentTailMs = chunk.every((sample) => sample === 0) ? this.silentTailMs + (chunk.length / AVATAR_MEDIA.audioSampleRate) * 1000 : 0;
      await this.audioSource.captureFrame(toLiveKitAudioFrame(chunk));
    }
  }

  /**
   * A turn's speech comes next: the silence queued ahead of it (idle frames' audio not yet sent)
   * is dropped down to the lead, so the speech is sent that much sooner. Only when all that is
   * queued is silence: the end of a turn just before still plays whole.
   */
  async speechStarting(): Promise<void> {
    const lead = this.speechLeadMs;
    if (lead === null) return;
    const queued = this.audioSource.queuedDuration;
    if (queued <= lead || queued > this.silentTailMs) return;
    this.audioSource.clearQueue();
    for (let ms = 0; ms < lead; ms += CHUNK_MS) await this.audioSource.captureFrame(toLiveKitAudioFrame(new Int16Array((AVATAR_MEDIA.audioSampleRate / 1000) * CHUNK_MS)));
    this.droppedSilenceMs += queued - lead;
    this.silentTailMs = lead;
  }

  /** Drops the sound queued (an `lk.clear_buffer`); returns how much was dropped (ms). */
  clearAudio(): number {
    const dropped = this.audioSource.queuedDuration;
    this.audioSource.clearQueue();
    this.silentTailMs = 0;
    return dropped;
  }

  get size(): { readonly width: number; readonly height: number } {
    return this.videoSize;
  }

  async close(): Promise<void> {
    await Promise.allSettled([this.audioSource.close(), this.videoSource?.close()]);
  }
}
