/**
 * The input side of a LiveKit room, the twin of the embedded room's `RoomAudioInput`: a
 * processor, placed first in a pipeline, that turns a participant's microphone (read by a
 * `LiveKitBotRoom` with rtc-node's AudioStream: 10 ms of mono PCM) into `input-audio` frames at
 * the pipeline's input rate (resampled when the rates differ), in chunks of `chunkMs`. It follows
 * one participant (the one named, or the first heard until it leaves) and passes on who is in the
 * room (`presence`). The resampling, chunking and following are RoomAudioInput's own: only the
 * source differs. Pairs with `LiveKitBotRoom.publishAvatar` (the output side).
 */
import { RoomAudioInput, type RoomAudioInputOptions, type RoomAudioSource } from '../webrtc/room-audio-input.ts';

export type LiveKitAudioInputOptions = RoomAudioInputOptions;

export class LiveKitAudioInput extends RoomAudioInput {
  /** `room`: a `LiveKitBotRoom` (or anything with its `participantAudio` and `subscriberEvents`). */
  constructor(room: RoomAudioSource, options: LiveKitAudioInputOptions = {}) {
    super(room, { name: 'LiveKitAudioInput', ...options });
  }
}
