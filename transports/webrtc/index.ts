/**
 * WebRTC publishing of a face session: the embedded room provider (rooms, tokens, signalling
 * protocol, server-side peers on wrtc), the media conversions shared with LiveKit, and the
 * `publishAvatar` entry point. The browser client is `room-client.js` (served by server/rooms).
 */
export { publishAvatar, createAvatarPublisher, parseAvatarRoomSettings, type AvatarRoomSettings, type PublishAvatarContext } from './publish-avatar.ts';
export { publishToEmbeddedRoom, EMBEDDED_PUBLISHER_DEFAULTS, type PublishedAvatar, type EmbeddedPublishOptions } from './embedded-publisher.ts';
export { RoomRegistry, ROOM_REGISTRY_DEFAULTS, type CreatedRoom, type RoomGrant, type RoomRegistryOptions, type RoomRole } from './room-registry.ts';
export {
  Room, ROOM_JOIN_LIMITS, type ParticipantAudio, type ParticipantChannel, type RoomParticipant, type RoomPublication, type RoomClientMessage, type RoomSubscriberEvent, type RoomSubscriberInfo,
} from './room.ts';
export { RoomAudioInput, ROOM_AUDIO_INPUT_DEFAULTS, type RoomAudioInputOptions, type RoomAudioSource } from './room-audio-input.ts';
export type { SubscriberAudio } from './subscriber-peer.ts';
export { RemoteCandidateScreen, REMOTE_CANDIDATE_DEFAULTS, type CandidateVerdict, type RemoteCandidateScreenOptions } from './remote-candidates.ts';
export { RoomError, type RoomErrorCode } from './room-errors.ts';
export {
  SIGNALLING_LIMITS, SIGNALLING_CLOSE_CODES, SIGNALLING_PROTOCOL_VERSION, SignallingError, parseSignallingMessage,
  type SignallingClientMessage, type SignallingServerMessage, type SignallingErrorCode, type IceCandidateWire, type PublisherInfo,
} from '../../protocol/room-signalling.ts';
export { AVATAR_MEDIA, FrameAudioResampler, imageToI420, rgbaToI420, i420ByteLength, type I420Frame } from './avatar-media.ts';
export { AvatarFramePump, FRAME_PUMP_DEFAULTS, type AvatarMediaSink, type FramePumpStats, type FramePumpOptions } from './avatar-frame-pump.ts';
export { EmbeddedRoomProvider, type AvatarRoom, type RoomProvider, type EmbeddedRoomProviderOptions } from './room-provider.ts';
export {
  RTC_NETWORK_DEFAULTS, TURN_DEFAULTS, RtcSettingsError, rtcNetworkFromStrings, parseIceServers, checkRtcNetwork, mintTurnCredential, iceServersFor,
  type RtcNetworkSettings, type TurnSecretSettings,
} from './rtc-network.ts';
export type { PeerGatheringFailure } from './subscriber-peer.ts';
