/**
 * The audio of LiveKit's avatar protocol: an agent sends each segment of its speech (one TTS
 * utterance) as a byte stream on the topic `lk.audio_stream`, addressed to the avatar, whose
 * attributes `sample_rate` and `num_channels` (decimal strings) describe the content: raw
 * signed 16-bit little-endian PCM, channels interleaved, at whatever rate the agent's TTS made
 * (16, 22.05, 24, 44.1, 48 kHz...). The stream closes at the end of the segment.
 * (livekit/agents `DataStreamAudioOutput`, Python and Node; facts in docs/livekit-agents.md.)
 *
 * `AvatarAudioStreamDecoder` turns such a stream into the face engine's input (16 kHz mono
 * int16): it checks the header first (`parseAvatarAudioFormat`, a clear `AvatarAudioStreamError`
 * rather than noise from a wrong header), keeps a byte or a partial sample frame split across
 * chunks for the next one, mixes the channels down and resamples.
 */
import { Resampler, toMono } from '../../core/audio.ts';
import { FACE_TIMING } from '../../processors/avatar/face-model.ts';

/** The protocol's names (shared by the agent side and the worker side). */
export const AVATAR_PROTOCOL = {
  audioStreamTopic: 'lk.audio_stream',
  clearBufferMethod: 'lk.clear_buffer',
  playbackStartedMethod: 'lk.playback_started',
  playbackFinishedMethod: 'lk.playback_finished',
  /** Participant attribute naming the identity an avatar publishes for (set in the avatar's token). */
  publishOnBehalfAttribute: 'lk.publish_on_behalf',
} as const;

export const AVATAR_AUDIO_LIMITS = {
  /** Sample rates accepted in a stream header (telephony to studio). */
  minSampleRate: 8_000,
  maxSampleRate: 192_000,
  maxChannels: 8,
  /** Longest segment taken (ms of audio); the rest of a longer stream is refused, not queued in memory. */
  maxSegmentMs: 120_000,
  /**
   * Most audio queued and not played yet over all of a session's segments (ms): segments sent
   * faster than they play (each under `maxSegmentMs`) are cut here, so one agent cannot fill the
   * process's memory.
   */
  maxQueuedMs: 120_000,
} as const;

export type AvatarAudioStreamErrorCode = 'missing_audio_format' | 'bad_sample_rate' | 'bad_channel_count' | 'segment_too_long' | 'queue_full';

export class AvatarAudioStreamError extends Error {
  constructor(
    readonly code: AvatarAudioStreamErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'AvatarAudioStreamError';
  }
}

export interface AvatarAudioFormat {
  readonly sampleRate: number;
  readonly channels: number;
}

const DECIMAL = /^[1-9][0-9]{0,6}$/;

/** Reads and checks a stream header's attributes. */
export function parseAvatarAudioFormat(attributes: Readonly<Record<string, string>> | undefined): AvatarAudioFormat {
  const rate = attributes?.['sample_rate'];
  const channels = attributes?.['num_channels'];
  if (rate === undefined || channels === undefined) throw new AvatarAudioStreamError('missing_audio_format', 'an lk.audio_stream byte stream must carry the sample_rate and num_channels attributes');
  const sampleRate = DECIMAL.test(rate) ? Number(rate) : NaN;
  if (!(sampleRate >= AVATAR_AUDIO_LIMITS.minSampleRate && sampleRate <= AVATAR_AUDIO_LIMITS.maxSampleRate)) {
    throw new AvatarAudioStreamError('bad_sample_rate', `sample_rate must be a whole number of Hz from ${AVATAR_AUDIO_LIMITS.minSampleRate} to ${AVATAR_AUDIO_LIMITS.maxSampleRate}, got ${JSON.stringify(rate.slice(0, 32))}`);
  }
  const count = DECIMAL.test(channels) ? Number(channels) : NaN;
  if (!(count >= 1 && count <= AVATAR_AUDIO_LIMITS.maxChannels)) {
    throw new AvatarAudioStreamError('bad_channel_count', `num_channels must be a whole number from 1 to ${AVATAR_AUDIO_LIMITS.maxChannels}, got ${JSON.stringify(channels.slice(0, 32))}`);
  }
  return { sampleRate, channels: count };
}

export class AvatarAudioStreamDecoder {
  readonly format: AvatarAudioFormat;
  private readonly resampler: Resampler | undefined;
  private readonly frameBytes: number;
  /** Bytes of an incomplete sample frame left by the last chunk. */
  private rest = new Uint8Array(0);
  private outputSamples = 0;
  private readonly maxSamples: number;

  constructor(attributes: Readonly<Record<string, string>> | undefined, maxSegmentMs: number = AVATAR_AUDIO_LIMITS.maxSegmentMs) {
    this.format = parseAvatarAudioFormat(attributes);
    this.frameBytes = 2 * this.format.channels;
    this.resampler = this.format.sampleRate === FACE_TIMING.audioSampleRate ? undefined : new Resampler(this.format.sampleRate, FACE_TIMING.audioSampleRate);
    this.maxSamples = Math.floor((maxSegmentMs / 1000) * FACE_TIMING.audioSampleRate);
  }

  /** 16 kHz mono samples produced so far. */
  get samples(): number {
    return this.outputSamples;
  }

  /** One chunk of the stream's content, as 16 kHz mono (possibly empty). Throws `segment_too_long` past the limit. */
  push(chunk: Uint8Array): Int16Array {
    let bytes = chunk;
    if (this.rest.length > 0) {
      bytes = new Uint8Array(this.rest.length + chunk.length);
      bytes.set(this.rest);
      bytes.set(chunk, this.rest.length);
    }
    const whole = bytes.length - (bytes.length % this.frameBytes);
    this.rest = bytes.slice(whole);
    if (whole === 0) return new Int16Array(0);
    // Little-endian int16 read explicitly: the chunk's offset need not be 2-byte aligned.
    const view = new DataView(bytes.buffer, bytes.byteOffset, whole);
    const interleaved = new Int16Array(whole / 2);
    for (let i = 0; i < interleaved.length; i++) interleaved[i] = view.getInt16(i * 2, true);
    const mono = this.format.channels === 1 ? interleaved : toMono(interleaved, this.format.channels);
    return this.emit(this.resampler ? this.resampler.process(mono) : mono);
  }

  /** The end of the stream: what the resampler still holds (an incomplete last sample frame is dropped). */
  flush(): Int16Array {
    this.rest = new Uint8Array(0);
    return this.emit(this.resampler ? this.resampler.flush() : new Int16Array(0));
  }

  private emit(pcm: Int16Array): Int16Array {
    if (this.outputSamples + pcm.length > this.maxSamples) {
      throw new AvatarAudioStreamError('segment_too_long', `a segment longer than ${AVATAR_AUDIO_LIMITS.maxSegmentMs / 1000} s of audio is refused`);
    }
    this.outputSamples += pcm.length;
    return pcm;
  }
}
