/**
 * Publishes a face session into a LiveKit room: connects with the URL and a token the room owner
 * issued for the avatar participant, publishes a microphone-source audio track at once and a
 * camera-source video track with the first picture. Tested with the real SDK against a local fake
 * LiveKit server that speaks LiveKit's signalling protocol and receives the media with libwebrtc
 * (test/webrtc/livekit-publish.test.ts, test/fakes/livekit-server.ts); not against a real
 * LiveKit server. The conversions are tested in test/webrtc/livekit-media.test.ts.
 */
import type { Observable } from 'rxjs';
import { LocalAudioTrack, Room, RoomEvent, TrackPublishOptions, TrackSource, type LocalVideoTrack } from '@livekit/rtc-node';
import type { FaceFrame } from '../../processors/avatar/face-model.ts';
import { AvatarFramePump, type FramePumpOptions } from '../webrtc/avatar-frame-pump.ts';
import type { PublishedAvatar } from '../webrtc/embedded-publisher.ts';
import { RoomError } from '../webrtc/room-errors.ts';
import { LIVEKIT_MEDIA_DEFAULTS, LiveKitMediaSink } from './livekit-media-sink.ts';

export interface LiveKitPublishOptions extends FramePumpOptions {
  /** `wss://` address of the LiveKit server. */
  readonly url: string;
  /** Access token for the avatar participant (canPublish grant). */
  readonly token: string;
  readonly audioQueueMs?: number;
}

export async function publishToLiveKit(frames: Observable<FaceFrame>, options: LiveKitPublishOptions): Promise<PublishedAvatar> {
  if (!/^wss?:\/\//.test(options.url)) throw new RoomError('invalid_settings', 'the LiveKit url must start with ws:// or wss://');
  const room = new Room();
  try {
    await room.connect(options.url, options.token, { autoSubscribe: false, dynacast: false });
  } catch (error) {
    await room.disconnect().catch(() => undefined);
    throw new RoomError('publish_failed', `could not join the LiveKit room: ${error instanceof Error ? error.message : String(error)}`);
  }
  const participant = room.localParticipant;
  if (!participant) {
    await room.disconnect().catch(() => undefined);
    throw new RoomError('publish_failed', 'joined the LiveKit room without a local participant');
  }
  const sink = new LiveKitMediaSink(async (track: LocalVideoTrack) => {
    await participant.publishTrack(track, new TrackPublishOptions({ source: TrackSource.SOURCE_CAMERA }));
  }, options.audioQueueMs);
  try {
    const audioTrack = LocalAudioTrack.createAudioTrack(LIVEKIT_MEDIA_DEFAULTS.audioTrackName, sink.audioSource);
    await participant.publishTrack(audioTrack, new TrackPublishOptions({ source: TrackSource.SOURCE_MICROPHONE }));
  } catch (error) {
    await sink.close();
    await room.disconnect().catch(() => undefined);
    throw new RoomError('publish_failed', `could not publish the avatar audio: ${error instanceof Error ? error.message : String(error)}`);
  }
  const pump = new AvatarFramePump(frames, sink, options);
  room.on(RoomEvent.Disconnected, () => pump.stop());
  pump.start();
  const ended = pump.done.then(async () => {
    await sink.close();
    await room.disconnect().catch(() => undefined);
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
