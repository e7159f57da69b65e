/** Publishing a face session into a LiveKit room with @livekit/rtc-node. */
export { LIVEKIT_JOIN_FAILED, publishToLiveKit, type LiveKitPublishOptions } from './livekit-publisher.ts';
export { LiveKitAddressRefused, liveKitAddressPolicy, PINNED_RELAY_DEFAULTS, resolveLiveKitTarget, startPinnedRelay, type LiveKitTarget, type PinnedRelay } from './livekit-address.ts';
export { LiveKitMediaSink, LIVEKIT_MEDIA_DEFAULTS, toLiveKitAudioFrame, toLiveKitVideoFrame } from './livekit-media-sink.ts';
export { LiveKitRoomProvider, LIVEKIT_ROOM_DEFAULTS, type LiveKitRoomProviderOptions } from './livekit-room-provider.ts';
export { joinLiveKitRoom, publishFramesToRoom, type JoinedLiveKitRoom, type LiveKitAvatarPublication, type LiveKitJoinOptions, type PublishFramesOptions } from './livekit-publisher.ts';
export {
  LiveKitBotRoom,
  LIVEKIT_BOT_ROOM_DEFAULTS,
  LIVEKIT_SESSION_TOPIC,
  parseLiveKitClientMessage,
  type LiveKitBotRoomOptions,
  type LiveKitBotRoomStats,
} from './livekit-bot-room.ts';
export { LiveKitAudioInput, type LiveKitAudioInputOptions } from './livekit-audio-input.ts';
