/**
 * Publishes a face session into an embedded room: the frames feed one RTCVideoSource and one
 * RTCAudioSource (wrtc), and every subscriber's peer connection gets its own tracks of those
 * sources. The publisher joins with the room's publisher token, like any participant.
 */
import { resolveOptions } from '../../core/options.ts';
import { randomUUID } from 'node:crypto';
import type { Observable } from 'rxjs';
import type { FaceFrame } from '../../processors/avatar/face-model.ts';
import { AVATAR_MEDIA, type I420Frame } from './avatar-media.ts';
import { AvatarFramePump, type AvatarMediaSink, type FramePumpOptions, type FramePumpStats } from './avatar-frame-pump.ts';
import type { RoomPublication } from './room.ts';
import type { RoomRegistry } from './room-registry.ts';
import { wrtcWithSources } from './wrtc.ts';
import { AudioPacer } from './audio-pacer.ts';
import { RealClock } from '../../core/clock.ts';

export const EMBEDDED_PUBLISHER_DEFAULTS = {
  /**
   * Pictures are held back 2 frames (80 ms) behind their audio. Measured in chromium with
   * test/webrtc/measure-av-sync.ts: without it the picture shows about 110 ms before its sound
   * (the receiver's audio jitter buffer runs ~50 ms deeper than video's and nothing re-aligns
   * them); with it the offset is about 25-40 ms, sound slightly late, which viewers tolerate far
   * better than sound early. Override with `videoDelayFrames`.
   */
  videoDelayFrames: 2,
  /**
   * Each frame's 40 ms of audio goes to the audio source 10 ms at a time, when due (the first
   * chunk at once; transports/webrtc/audio-pacer.ts), and the silence still waiting when a turn's
   * speech starts is dropped, so the speech follows at most 10 ms of silence sent ahead of it.
   * 0: every frame's audio at once (as before 2026-12-02; measured in docs/speech-between-frames.md).
   */
  audioChunkMs: 10,
} as const;

/** What every publisher (embedded or LiveKit) hands back. */
export interface PublishedAvatar {
  readonly participantId: string;
  readonly room: string;
  readonly stats: FramePumpStats;
  /** Settles when publishing ended: frames completed, the room closed, or `close()`. */
  readonly ended: Promise<void>;
  /** Stops publishing and leaves the room (idempotent). Subscribers' tracks end. */
  close(): Promise<void>;
  /**
   * Sends a message to the room's clients (e.g. a client-mode tool call, which the browser
   * client turns into the `svcToolCall` window event). Returns how many clients it reached;
   * 0 after `close()`, once another publisher took the room, or once the room closed. Frames that
   * completed by themselves end the media, not the messages: a session's last ones (its
   * `session-ended` after a farewell) still reach the room. Messages must be JSON-serialisable objects.
   */
  sendMessage?(message: Readonly<Record<string, unknown>>): number;
}

export interface EmbeddedPublishOptions extends FramePumpOptions {
  /** `EMBEDDED_PUBLISHER_DEFAULTS.audioChunkMs`. */
  readonly audioChunkMs?: number;
  readonly rooms: RoomRegistry;
  readonly room: string;
  readonly token: string;
}

class EmbeddedPublication implements RoomPublication, AvatarMediaSink {
  readonly participantId = `pub_${randomUUID()}`;
  readonly tracks;
  private readonly video: InstanceType<ReturnType<typeof wrtcWithSources>['nonstandard']['RTCVideoSource']>;
  private readonly audio: InstanceType<ReturnType<typeof wrtcWithSources>['nonstandard']['RTCAudioSource']>;

  private closed = false;
  /** Audio goes to the source 10 ms at a time, when due (`audioChunkMs`). */
  private readonly pacer: AudioPacer;

  constructor(private readonly onClosedByRoom: (reason: string) => void, audioChunkMs: number) {
    const { RTCVideoSource, RTCAudioSource } = wrtcWithSources().nonstandard;
    this.video = new RTCVideoSource();
    this.audio = new RTCAudioSource();
    this.pacer = new AudioPacer((samples) => this.send(samples), audioChunkMs, new RealClock());
    this.tracks = [
      { kind: 'video' as const, track_id: `${this.participantId}_video` },
      { kind: 'audio' as const, track_id: `${this.participantId}_audio` },
    ];
  }

  createTracks(): MediaStreamTrack[] {
    return [this.video.createTrack(), this.audio.createTrack()];
  }

  deliver(video: I420Frame | null, audio: readonly Int16Array[]): void {
    // Picture first, then its audio's first 10 ms in the same tick (both stamped with the same
    // capture time); the rest of the audio when due (`audioChunkMs`).
    if (this.closed) return;
    if (video) this.video.onFrame({ width: video.width, height: video.height, data: video.data });
    this.pacer.deliver(audio);
  }

  /** A turn's speech comes next: it follows the silence already sent, not the silence still waiting. */
  speechStarting(): void {
    this.pacer.speechStarting();
  }

  onRoomClosed(reason: string): void {
    this.closed = true;
    this.pacer.stop();
    this.onClosedByRoom(reason);
  }

  /** Publishing ended: the audio still waiting goes out (a farewell's last 30 ms), then nothing. */
  finish(): void {
    if (!this.closed) this.pacer.finish();
    this.closed = true;
  }

  private send(samples: Int16Array): void {
    this.audio.onData({ samples, sampleRate: AVATAR_MEDIA.audioSampleRate, bitsPerSample: 16, channelCount: 1, numberOfFrames: samples.length });
  }
}

export async function publishToEmbeddedRoom(frames: Observable<FaceFrame>, options: EmbeddedPublishOptions): Promise<PublishedAvatar> {
  const { room } = options.rooms.authorize(options.room, options.token, 'publisher');
  let pump: AvatarFramePump | undefined;
  const settings = resolveOptions(EMBEDDED_PUBLISHER_DEFAULTS, { videoDelayFrames: options.videoDelayFrames, audioChunkMs: options.audioChunkMs });
  const publication = new EmbeddedPublication(() => pump?.stop(), settings.audioChunkMs);
  pump = new AvatarFramePump(frames, publication, { ...options, videoDelayFrames: settings.videoDelayFrames });
  room.publish(publication);
  pump.start();
  const ended = pump.done.then(() => {
    publication.finish();
    room.unpublish(publication);
  });
  // Closed by its owner: no message after that. Frames that ran out (a face that finished its
  // farewell) leave the messages open: the session's last ones (session-ended) may still follow.
  let closed = false;
  return {
    participantId: publication.participantId,
    room: room.name,
    stats: pump.stats,
    ended,
    async close() {
      closed = true;
      pump.stop();
      await ended;
    },
    sendMessage(message) {
      if (!message || typeof message !== 'object' || Array.isArray(message)) throw new TypeError('sendMessage expects a JSON object');
      return closed ? 0 : room.sendAppMessage(publication, message);
    },
  };
}
