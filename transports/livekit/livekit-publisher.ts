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
import { LocalAudioTrack, Room, RoomEvent, TrackPublishOptions, TrackSource, type LocalVideoTrack } from '@livekit/rtc-node';
import type { FaceFrame } from '../../processors/avatar/face-model.ts';
import { AvatarFramePump, type FramePumpOptions } from '../webrtc/avatar-frame-pump.ts';
import type { PublishedAvatar } from '../webrtc/embedded-publisher.ts';
import { RoomError } from '../webrtc/room-errors.ts';
import type { HostResolver } from '../../processors/tools/webhook-target.ts';
import { liveKitAddressPolicy, resolveLiveKitTarget, startPinnedRelay, type PinnedRelay } from './livekit-address.ts';
import { LIVEKIT_MEDIA_DEFAULTS, LiveKitMediaSink } from './livekit-media-sink.ts';

export interface LiveKitPublishOptions extends FramePumpOptions {
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

export async function publishToLiveKit(frames: Observable<FaceFrame>, options: LiveKitPublishOptions): Promise<PublishedAvatar> {
  if (!/^wss?:\/\//.test(options.url)) throw new RoomError('invalid_settings', 'the LiveKit url must start with ws:// or wss://');
  let relay: PinnedRelay;
  try {
    const target = await resolveLiveKitTarget(options.url, liveKitAddressPolicy(options.livekitAllowedRanges), options.resolver);
    relay = await startPinnedRelay(target, { ca: options.ca });
  } catch (error) {
    throw joinFailed(error);
  }
  const room = new Room();
  try {
    await room.connect(relay.url, options.token, { autoSubscribe: false, dynacast: false });
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
  const sink = new LiveKitMediaSink(async (track: LocalVideoTrack) => {
    await participant.publishTrack(track, new TrackPublishOptions({ source: TrackSource.SOURCE_CAMERA }));
  }, options.audioQueueMs);
  try {
    const audioTrack = LocalAudioTrack.createAudioTrack(LIVEKIT_MEDIA_DEFAULTS.audioTrackName, sink.audioSource);
    await participant.publishTrack(audioTrack, new TrackPublishOptions({ source: TrackSource.SOURCE_MICROPHONE }));
  } catch (error) {
    await sink.close();
    await leave(room);
    await relay.close();
    throw joinFailed(error);
  }
  const pump = new AvatarFramePump(frames, sink, options);
  room.on(RoomEvent.Disconnected, () => pump.stop());
  pump.start();
  const ended = pump.done.then(async () => {
    try {
      await sink.close();
      await leave(room);
    } finally {
      await relay.close();
    }
  });
  return {
    participantId: participant.identity,
    room: room.name ?? '',
    stats: pump.stats,
    ended,
    async close() {
      pump.stop();
      await ended;
    },
  };
}
