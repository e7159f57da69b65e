/** Publishing a face session into a LiveKit room with @livekit/rtc-node. */
export { publishToLiveKit, type LiveKitPublishOptions } from './livekit-publisher.ts';
export { LiveKitMediaSink, LIVEKIT_MEDIA_DEFAULTS, toLiveKitAudioFrame, toLiveKitVideoFrame } from './livekit-media-sink.ts';
export { LiveKitRoomProvider, LIVEKIT_ROOM_DEFAULTS, type LiveKitRoomProviderOptions } from './livekit-room-provider.ts';
