/** Publishing a face session into a LiveKit room with @livekit/rtc-node. */
export { LIVEKIT_JOIN_FAILED, publishToLiveKit, type LiveKitPublishOptions } from './livekit-publisher.ts';
export { LiveKitAddressRefused, liveKitAddressPolicy, PINNED_RELAY_DEFAULTS, resolveLiveKitTarget, startPinnedRelay, type LiveKitTarget, type PinnedRelay } from './livekit-address.ts';
export { LiveKitMediaSink, LIVEKIT_MEDIA_DEFAULTS, toLiveKitAudioFrame, toLiveKitVideoFrame, type LiveKitMediaSinkOptions, type LiveKitMediaSinkStats } from './livekit-media-sink.ts';
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
export { AVATAR_AUDIO_LIMITS, AVATAR_PROTOCOL, AvatarAudioStreamDecoder, AvatarAudioStreamError, parseAvatarAudioFormat, type AvatarAudioFormat, type AvatarAudioStreamErrorCode } from './avatar-audio-stream.ts';
export { AvatarPlayback, type AvatarPlaybackEvent } from './avatar-playback.ts';
export {
  AVATAR_RPC_ERRORS,
  LIVEKIT_AVATAR_WORKER_DEFAULTS,
  LiveKitAvatarWorker,
  type AvatarWorkerEndReason,
  type LiveKitAvatarWorkerOptions,
  type LiveKitAvatarWorkerStats,
} from './livekit-avatar-worker.ts';
