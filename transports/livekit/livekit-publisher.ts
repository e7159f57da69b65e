/**
 * Publishes a face session into a LiveKit room: connects with the URL and a token the room owner
 * issued for the avatar participant, publishes a microphone-source audio track at once and a
 * camera-source video track with the first picture. Tested with the real SDK against a local fake
 * LiveKit server that speaks LiveKit's signalling protocol and receives the media with libwebrtc
 * (test/webrtc/livekit-publish.test.ts, test/fakes/livekit-server.ts); not against a real
 * LiveKit server.
 *
 * The url comes from a client, so it passes the SSRF address policy first and the SDK is pinned
 * to the checked address through a loopback relay (livekit-address.ts); private addresses are
 * reachable only through `livekitAllowedRanges` (SVC_LIVEKIT_ALLOWED_RANGES). Every failure to
 * join (refused address, unresolvable name, closed port, bad handshake, refused token) is the
 * same `publish_failed` message, so the answer cannot be used to map a network; the cause is on
 * the error's `cause` for the server's log. The conversions are tested in test/webrtc/livekit-media.test.ts.
 */
import type { Observable } from 'rxjs';
import { LocalAudioTrack, Room, RoomEvent, TrackPublishOptions, TrackSource, type LocalParticipant, type LocalVideoTrack } from '@livekit/rtc-node';
import { FACE_TIMING, type FaceFrame } from '../../processors/avatar/face-model.ts';
import { AvatarFramePump, FRAME_PUMP_DEFAULTS, type FramePumpOptions } from '../webrtc/avatar-frame-pump.ts';
import type { PublishedAvatar } from '../webrtc/embedded-publisher.ts';
import { RoomError } from '../webrtc/room-errors.ts';
import type { HostResolver } from '../../processors/tools/webhook-target.ts';
import { liveKitAddressPolicy, resolveLiveKitTarget, startPinnedRelay, type PinnedRelay } from './livekit-address.ts';
import { LIVEKIT_MEDIA_DEFAULTS, LiveKitMediaSink, type LiveKitMediaSinkStats } from './livekit-media-sink.ts';

export interface LiveKitPublishOptions extends FramePumpOptions {
  /** The pictures' size when known in advance (`PublishFramesOptions.videoSize`). */
  readonly videoSize?: { readonly width: number; readonly height: number };
  /** `wss://` address of the LiveKit server. */
  readonly url: string;
  /** Access token for the avatar participant (canPublish grant). */
  readonly token: string;
  readonly audioQueueMs?: number;
  /**
   * Private ranges (CIDRs) the url may resolve to despite the SSRF policy (operator setting
   * SVC_LIVEKIT_ALLOWED_RANGES); nothing private by default.
   */
  readonly livekitAllowedRanges?: readonly string[];
  /** Host name resolution (default: the system resolver). */
  readonly resolver?: HostResolver;
  /** Extra CA certificates trusted for `wss://` (private CAs, tests). */
  readonly ca?: string | readonly string[];
}

/** The one message every failure to join a LiveKit room gets (no network detail). */
export const LIVEKIT_JOIN_FAILED = 'could not join the LiveKit room (check the url and the token)';

/** Bound on the SDK's leave: a server that vanished mid-leave must not keep the relay open. */
const LEAVE_TIMEOUT_MS = 5000;

async function leave(room: Room): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([room.disconnect().catch(() => undefined), new Promise<void>((resolve) => (timer = setTimeout(resolve, LEAVE_TIMEOUT_MS)))]);
  clearTimeout(timer);
}

function joinFailed(cause: unknown): RoomError {
  const error = new RoomError('publish_failed', LIVEKIT_JOIN_FAILED);
  Object.defineProperty(error, 'cause', { value: cause, enumerable: false });
  return error;
}

/** Where to join and how the address is checked (the part of the publish options about the connection). */
export type LiveKitJoinOptions = Pick<LiveKitPublishOptions, 'url' | 'token' | 'livekitAllowedRanges' | 'resolver' | 'ca'>;

/** A joined LiveKit room: the SDK's `Room` behind its pinned relay. */
export interface JoinedLiveKitRoom {
  readonly room: Room;
  readonly participant: LocalParticipant;
  /** Leaves the room (bounded) and closes the relay; idempotent. */
  leave(): Promise<void>;
}

/**
 * Joins a LiveKit room through the SSRF policy and a pinned relay (see the file comment).
 * Every failure is a `RoomError('publish_failed', LIVEKIT_JOIN_FAILED)` with the cause attached.
 */
export async function joinLiveKitRoom(options: LiveKitJoinOptions, connect: { readonly autoSubscribe: boolean } = { autoSubscribe: false }): Promise<JoinedLiveKitRoom> {
  if (!/^wss?:\/\//i.test(options.url)) throw new RoomError('invalid_settings', 'the LiveKit url must start with ws:// or wss://');
  let relay: PinnedRelay;
  try {
    const target = await resolveLiveKitTarget(options.url, liveKitAddressPolicy(options.livekitAllowedRanges), options.resolver);
    relay = await startPinnedRelay(target, { ca: options.ca });
  } catch (error) {
    throw joinFailed(error);
  }
  const room = new Room();
  try {
    await room.connect(relay.url, options.token, { autoSubscribe: connect.autoSubscribe, dynacast: false });
  } catch (error) {
    await leave(room);
    await relay.close();
    throw joinFailed(error);
  }
  const participant = room.localParticipant;
  if (!participant) {
    await leave(room);
    await relay.close();
    throw joinFailed(new Error('joined the LiveKit room without a local participant'));
  }
  let left: Promise<void> | undefined;
  return {
    room,
    participant,
    leave() {
      left ??= (async () => {
        try {
          await leave(room);
        } finally {
          await relay.close();
        }
      })();
      return left;
    },
  };
}

/** The avatar published in a room the caller joined: publishing stops, the room stays joined. */
export interface LiveKitAvatarPublication {
  readonly stats: PublishedAvatar['stats'];
  /** Settles when publishing ended (frames completed, the room disconnected, or `stop()`), sources closed. */
  readonly ended: Promise<void>;
  stop(): Promise<void>;
  /** Audio (ms) waiting in the audio source, not yet sent. */
  readonly audioQueuedMs: number;
  /**
   * How much sooner the latest picture went out than its sound (ms; negative: after it): the
   * audio queued ahead of it, less the time it was held back (`pictureLagMs`, or the frame
   * pump's `videoDelayFrames`). Null before the first picture.
   */
  readonly pictureLeadMs: number | null;
  /** The media sink's own figures (audio underruns, pictures held). */
  readonly sinkStats: Readonly<LiveKitMediaSinkStats>;
  /**
   * Drops the audio waiting in the audio source (an interruption: the sound stops now rather
   * than after the queue drains). Returns how many ms were dropped.
   */
  clearAudio(): number;
}

/**
 * Publishes a face session over an already joined room: a microphone-source audio track at once,
 * a camera-source video track with the first picture. Rejects with `publish_failed` when the
 * server refuses the audio track.
 */
export interface PublishFramesOptions extends FramePumpOptions {
  readonly audioQueueMs?: number;
  /**
   * When set, a turn's speech does not wait behind the idle silence queued in the audio source:
   * it is dropped down to this lead (ms) when the speech starts (`LiveKitMediaSink`). Unset, the
   * queue is kept.
   */
  readonly speechLeadMs?: number;
  /**
   * When set, each picture goes out when the audio delivered with it is sent, plus this lag (ms),
   * however much audio is queued ahead (`LiveKitMediaSink`); use with `videoDelayFrames` 0.
   * Unset, pictures go out as they come.
   */
  readonly pictureLagMs?: number;
  /**
   * Simulcast layers for the video (default: the SDK's, on). A session has one viewer, so the
   * session bot turns them off: one encoding instead of three on the bot's CPU.
   */
  readonly simulcast?: boolean;
  /**
   * The pictures' size when known in advance (a face session's): the video track is published at
   * once, together with the audio, so that one negotiation carries both (odd sizes cropped to
   * even, as the pictures are). Without it the video
   * track comes with the first picture, in a negotiation of its own.
   */
  readonly videoSize?: { readonly width: number; readonly height: number };
}

export async function publishFramesToRoom(room: Room, frames: Observable<FaceFrame>, options: PublishFramesOptions = {}): Promise<LiveKitAvatarPublication> {
  const participant = room.localParticipant;
  if (!participant) throw joinFailed(new Error('the LiveKit room has no local participant'));
  const sink = new LiveKitMediaSink(async (track: LocalVideoTrack) => {
    await participant.publishTrack(track, new TrackPublishOptions({ source: TrackSource.SOURCE_CAMERA, ...(options.simulcast === undefined ? {} : { simulcast: options.simulcast }) }));
  }, { audioQueueMs: options.audioQueueMs, speechLeadMs: options.speechLeadMs ?? null, pictureLagMs: options.pictureLagMs ?? null });
  try {
    const audioTrack = LocalAudioTrack.createAudioTrack(LIVEKIT_MEDIA_DEFAULTS.audioTrackName, sink.audioSource);
    // Both at once, so that the SDK's negotiation (debounced, 150 ms) offers both: rtc-node 1.1's
    // publisher transport deadlocks when a negotiation is asked for while its previous offer still
    // waits for the server's answer (the renegotiation it then owes is made under a lock it
    // already holds), and the second track is never offered nor its publishTrack resolved. Seen
    // with the fake LiveKit server answering in 400 ms and the video published 180 ms after the
    // audio; against any server, a video track published on a first picture that comes while the
    // audio's offer is out (docs/webrtc.md).
    // Odd sizes are cropped to even, as the pictures are (rgbaToI420).
    const video = options.videoSize ? sink.openVideo(options.videoSize.width & ~1, options.videoSize.height & ~1) : undefined;
    const [audio] = await Promise.allSettled([participant.publishTrack(audioTrack, new TrackPublishOptions({ source: TrackSource.SOURCE_MICROPHONE })), video]);
    if (audio.status === 'rejected') throw audio.reason;
    await video;
  } catch (error) {
    await sink.close();
    throw joinFailed(error);
  }
  const pump = new AvatarFramePump(frames, sink, options);
  const onDisconnected = () => pump.stop();
  room.on(RoomEvent.Disconnected, onDisconnected);
  pump.start();
  const ended = pump.done.then(async () => {
    room.off(RoomEvent.Disconnected, onDisconnected);
    await sink.close();
  });
  return {
    stats: pump.stats,
    ended,
    async stop() {
      pump.stop();
      await ended;
    },
    get audioQueuedMs() {
      return sink.audioAheadMs;
    },
    get pictureLeadMs() {
      const lead = sink.stats.lastPictureLeadMs;
      // Pictures the pump held back by a count went out that many frames after their own sound's audio.
      return lead === null ? null : lead - (options.videoDelayFrames ?? FRAME_PUMP_DEFAULTS.videoDelayFrames) * FACE_TIMING.frameDurationMs;
    },
    sinkStats: sink.stats,
    clearAudio() {
      return sink.clearAudio();
    },
  };
}

export async function publishToLiveKit(frames: Observable<FaceFrame>, options: LiveKitPublishOptions): Promise<PublishedAvatar> {
  const joined = await joinLiveKitRoom(options);
  let publication: LiveKitAvatarPublication;
  try {
    publication = await publishFramesToRoom(joined.room, frames, options);
  } catch (error) {
    await joined.leave();
    throw error;
  }
  const ended = publication.ended.then(() => joined.leave());
  return {
    participantId: joined.participant.identity,
    room: joined.room.name ?? '',
    stats: publication.stats,
    ended,
    async close() {
      await publication.stop();
      await ended;
    },
  };
}
