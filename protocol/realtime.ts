/**
 * The /realtime face-model protocol: message shapes and the binary codec, shared by the server
 * endpoint and the clients. The full description, with limits and error codes, is in
 * docs/realtime-protocol.md; this file is its executable form.
 *
 * Text messages are JSON objects with a `type`. Binary messages start with a fixed little-endian
 * header whose first byte says what follows:
 *
 *   audio in  (client -> server), 8-byte header then s16le PCM, 16 kHz mono:
 *     0 u8  kind = 0x01      1 u8  version = 1     2 u16 flags (bit 0: end of turn after this chunk)
 *     4 u32 sequence number (per session, from 0)
 *
 *   frame out (server -> client), 28-byte header, then the image, then the audio:
 *     0 u8  kind = 0x02      1 u8  version = 1     2 u8  frame type (0 idle, 1 speech-start, 2 speech, 3 fade-out)
 *     3 u8  flags (bit 0: final frame of a turn, bit 1: image present)
 *     4 u32 frame index      8 u32 pts (ms)        12 u32 turn id (0 = none)
 *     16 u16 width           18 u16 height         20 u32 image byte length
 *     24 u16 audio sample count (640)              26 u8 image format (0 jpeg, 1 rgb)   27 u8 reserved
 */

export const PROTOCOL_VERSION = 1;
export const AUDIO_IN_KIND = 0x01;
export const FRAME_OUT_KIND = 0x02;
export const AUDIO_HEADER_BYTES = 8;
export const FRAME_HEADER_BYTES = 28;

/** The limits a server enforces; `session_ready.limits` carries the values of that server. */
export interface RealtimeLimits {
  readonly maxMessageBytes: number;
  readonly maxAudioChunkMs: number;
  readonly maxQueuedAudioMs: number;
  readonly maxControlMessagesPerSecond: number;
  readonly idleTimeoutMs: number;
  readonly audioSampleRate: number;
}

export const REALTIME_LIMITS: RealtimeLimits = {
  /** Largest message a client may send (bytes); larger ones get `frame_too_large`. */
  maxMessageBytes: 64 * 1024,
  /** Largest audio chunk (ms) in one message: 1 s of 16 kHz s16le = 32,000 bytes. */
  maxAudioChunkMs: 1_000,
  /** Audio queued ahead of playback beyond this (ms) is refused with `rate_limited`. */
  maxQueuedAudioMs: 60_000,
  /** Text messages per second per session before `rate_limited`. */
  maxControlMessagesPerSecond: 50,
  /** How long a client may stay connected without sending anything (ms); `ping` keeps it alive. */
  idleTimeoutMs: 5 * 60_000,
  /** Input audio format: 16 kHz s16le mono, the face models' rate (FACE_TIMING.audioSampleRate; test/realtime/protocol.test.ts checks they agree). */
  audioSampleRate: 16_000,
};

/**
 * Query parameter names refused whatever their value (a key under a familiar name): the server
 * answers `auth_failed`, and the clients refuse such a URL before connecting. The Python client's
 * `_KEY_PARAMS` repeats it.
 */
export const URL_KEY_PARAMETER_NAMES: ReadonlySet<string> = new Set(['api_key', 'apikey', 'key', 'token', 'access_token', 'auth', 'authorization', 'x-api-key', 'x_api_key', 'bearer']);

export const FRAME_TYPES = ['idle', 'speech-start', 'speech', 'fade-out'] as const;
export type RealtimeFrameType = (typeof FRAME_TYPES)[number];

export type RealtimeErrorCode =
  | 'auth_failed'
  | 'unknown_config'
  | 'invalid_configuration'
  | 'config_reference_missing'
  | 'config_reference_not_image'
  | 'config_no_face'
  | 'config_variant_unavailable'
  | 'frame_too_large'
  | 'malformed_message'
  | 'not_ready'
  | 'rate_limited'
  | 'server_busy'
  | 'idle_timeout'
  | 'slow_consumer'
  | 'webrtc_failed'
  | 'internal_error';

/** WebSocket close codes used when the server closes because of an error. */
export const CLOSE_CODES: Readonly<Partial<Record<RealtimeErrorCode, number>>> = {
  auth_failed: 4401,
  unknown_config: 4404,
  invalid_configuration: 4422,
  config_reference_missing: 4404,
  config_reference_not_image: 4422,
  config_no_face: 4422,
  config_variant_unavailable: 4404,
  server_busy: 4503,
  idle_timeout: 4408,
  slow_consumer: 4429,
  internal_error: 1011,
};

// ---- text messages ------------------------------------------------------------------------------

export interface SessionReadyMessage {
  readonly type: 'session_ready';
  readonly session_id: string;
  readonly config_id: string;
  readonly model_variant_id: string;
  readonly width: number;
  readonly height: number;
  readonly fps: 25;
  readonly audio_in: { readonly sample_rate: 16000; readonly channels: 1; readonly format: 's16le' };
  readonly audio_out: { readonly sample_rate: 16000; readonly channels: 1; readonly format: 's16le'; readonly samples_per_frame: 640 };
  readonly video: { readonly format: 'jpeg' | 'rgb' };
  readonly limits: RealtimeLimits;
  readonly protocol_version: number;
}

export type ServerMessage =
  | SessionReadyMessage
  | { readonly type: 'error'; readonly code: RealtimeErrorCode; readonly message: string; readonly fatal: boolean }
  | { readonly type: 'turn_started'; readonly turn_id: number }
  | { readonly type: 'turn_cancelled'; readonly turn_id: number | null; readonly had_speech: boolean }
  | { readonly type: 'webrtc_connected'; readonly participant_id: string; readonly room: string }
  | { readonly type: 'pong'; readonly t: number }
  | { readonly type: 'session_ended'; readonly reason: string };

/** Direct WebRTC: where the service should publish the avatar instead of sending frames. */
export type WebRTCSettings =
  | { readonly provider: 'embedded'; readonly room: string; readonly token: string }
  | { readonly provider: 'livekit'; readonly url: string; readonly token: string };

export type ClientMessage =
  | { readonly type: 'webrtc'; readonly settings: WebRTCSettings }
  | { readonly type: 'start_turn' }
  | { readonly type: 'end_turn' }
  | { readonly type: 'cancel' }
  | { readonly type: 'end' }
  | { readonly type: 'ping'; readonly t?: number };

const CLIENT_TYPES = new Set(['webrtc', 'start_turn', 'end_turn', 'cancel', 'end', 'ping']);

export class ProtocolError extends Error {
  constructor(readonly code: RealtimeErrorCode, message: string) {
    super(message);
    this.name = 'ProtocolError';
  }
}

/** Parses a client text message; throws ProtocolError(`malformed_message`) on anything else. */
export function parseClientMessage(text: string): ClientMessage {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new ProtocolError('malformed_message', 'text messages must be JSON objects');
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) throw new ProtocolError('malformed_message', 'text messages must be JSON objects');
  const type = (value as { type?: unknown }).type;
  if (typeof type !== 'string' || !CLIENT_TYPES.has(type)) {
    throw new ProtocolError('malformed_message', `unknown message type ${JSON.stringify(type)}; expected one of ${[...CLIENT_TYPES].join(', ')}`);
  }
  if (type === 'webrtc') validateWebRTC((value as { settings?: unknown }).settings);
  return value as ClientMessage;
}

function validateWebRTC(settings: unknown): void {
  const s = settings as Record<string, unknown> | undefined;
  const str = (v: unknown, max: number) => typeof v === 'string' && v.length > 0 && v.length <= max;
  if (!s || typeof s !== 'object') throw new ProtocolError('malformed_message', 'webrtc needs a settings object');
  if (s.provider === 'embedded' && str(s.room, 256) && str(s.token, 4096)) return;
  if (s.provider === 'livekit' && str(s.url, 2048) && /^wss?:\/\//.test(s.url as string) && str(s.token, 4096)) return;
  throw new ProtocolError('malformed_message', 'webrtc settings must be {provider:"embedded", room, token} or {provider:"livekit", url (ws/wss), token}');
}

export function parseServerMessage(text: string): ServerMessage {
  const value = JSON.parse(text) as ServerMessage;
  if (!value || typeof value !== 'object' || typeof value.type !== 'string') throw new ProtocolError('malformed_message', 'bad server message');
  return value;
}

// ---- binary audio in ----------------------------------------------------------------------------

export interface AudioInMessage {
  readonly sequence: number;
  readonly endOfTurn: boolean;
  readonly pcm: Int16Array;
}

export function encodeAudioIn(pcm: Int16Array, sequence: number, endOfTurn = false): Uint8Array {
  const out = new Uint8Array(AUDIO_HEADER_BYTES + pcm.byteLength);
  const view = new DataView(out.buffer);
  view.setUint8(0, AUDIO_IN_KIND);
  view.setUint8(1, PROTOCOL_VERSION);
  view.setUint16(2, endOfTurn ? 1 : 0, true);
  view.setUint32(4, sequence >>> 0, true);
  for (let i = 0; i < pcm.length; i++) view.setInt16(AUDIO_HEADER_BYTES + i * 2, pcm[i]!, true);
  return out;
}

export function decodeAudioIn(bytes: Uint8Array): AudioInMessage {
  if (bytes.byteLength > REALTIME_LIMITS.maxMessageBytes) throw new ProtocolError('frame_too_large', `message of ${bytes.byteLength} bytes exceeds ${REALTIME_LIMITS.maxMessageBytes}`);
  if (bytes.byteLength < AUDIO_HEADER_BYTES) throw new ProtocolError('malformed_message', `audio message shorter than its ${AUDIO_HEADER_BYTES}-byte header`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (view.getUint8(0) !== AUDIO_IN_KIND) throw new ProtocolError('malformed_message', `binary messages from clients must be audio (kind 0x01), got 0x${view.getUint8(0).toString(16).padStart(2, '0')}`);
  if (view.getUint8(1) !== PROTOCOL_VERSION) throw new ProtocolError('malformed_message', `unsupported protocol version ${view.getUint8(1)}`);
  const payload = bytes.byteLength - AUDIO_HEADER_BYTES;
  if (payload % 2 !== 0) throw new ProtocolError('malformed_message', 'audio payload must be whole 16-bit samples');
  const maxSamples = (REALTIME_LIMITS.audioSampleRate * REALTIME_LIMITS.maxAudioChunkMs) / 1000;
  if (payload / 2 > maxSamples) throw new ProtocolError('frame_too_large', `audio chunk longer than ${REALTIME_LIMITS.maxAudioChunkMs} ms`);
  const pcm = new Int16Array(payload / 2);
  for (let i = 0; i < pcm.length; i++) pcm[i] = view.getInt16(AUDIO_HEADER_BYTES + i * 2, true);
  return { sequence: view.getUint32(4, true), endOfTurn: (view.getUint16(2, true) & 1) === 1, pcm };
}

// ---- binary frame out ---------------------------------------------------------------------------

export interface FrameOutMessage {
  readonly type: RealtimeFrameType;
  readonly final: boolean;
  readonly index: number;
  readonly ptsMs: number;
  readonly turnId: number | null;
  readonly width: number;
  readonly height: number;
  readonly imageFormat: 'jpeg' | 'rgb';
  /** Absent when the server skipped the image (the client still gets the audio). */
  readonly image: Uint8Array | undefined;
  readonly audio: Int16Array;
}

export function encodeFrameOut(f: FrameOutMessage): Uint8Array {
  const imageBytes = f.image?.byteLength ?? 0;
  const out = new Uint8Array(FRAME_HEADER_BYTES + imageBytes + f.audio.byteLength);
  const view = new DataView(out.buffer);
  view.setUint8(0, FRAME_OUT_KIND);
  view.setUint8(1, PROTOCOL_VERSION);
  view.setUint8(2, FRAME_TYPES.indexOf(f.type));
  view.setUint8(3, (f.final ? 1 : 0) | (f.image ? 2 : 0));
  view.setUint32(4, f.index >>> 0, true);
  view.setUint32(8, Math.round(f.ptsMs) >>> 0, true);
  view.setUint32(12, (f.turnId ?? 0) >>> 0, true);
  view.setUint16(16, f.width, true);
  view.setUint16(18, f.height, true);
  view.setUint32(20, imageBytes, true);
  view.setUint16(24, f.audio.length, true);
  view.setUint8(26, f.imageFormat === 'rgb' ? 1 : 0);
  if (f.image) out.set(f.image, FRAME_HEADER_BYTES);
  const audioAt = FRAME_HEADER_BYTES + imageBytes;
  for (let i = 0; i < f.audio.length; i++) view.setInt16(audioAt + i * 2, f.audio[i]!, true);
  return out;
}

export function decodeFrameOut(bytes: Uint8Array): FrameOutMessage {
  if (bytes.byteLength < FRAME_HEADER_BYTES) throw new ProtocolError('malformed_message', 'frame message shorter than its header');
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (view.getUint8(0) !== FRAME_OUT_KIND) throw new ProtocolError('malformed_message', 'not a frame message');
  if (view.getUint8(1) !== PROTOCOL_VERSION) throw new ProtocolError('malformed_message', `unsupported protocol version ${view.getUint8(1)}`);
  const typeIndex = view.getUint8(2);
  const type = FRAME_TYPES[typeIndex];
  if (!type) throw new ProtocolError('malformed_message', `unknown frame type ${typeIndex}`);
  const flags = view.getUint8(3);
  const imageBytes = view.getUint32(20, true);
  const samples = view.getUint16(24, true);
  const format = view.getUint8(26);
  if (format > 1) throw new ProtocolError('malformed_message', `unknown image format ${format}`);
  if (!(flags & 2) && imageBytes !== 0) throw new ProtocolError('malformed_message', 'image bytes present but the image flag is clear');
  if (FRAME_HEADER_BYTES + imageBytes + samples * 2 !== bytes.byteLength) throw new ProtocolError('malformed_message', 'frame message length does not match its header');
  const audioAt = FRAME_HEADER_BYTES + imageBytes;
  const audio = new Int16Array(samples);
  for (let i = 0; i < samples; i++) audio[i] = view.getInt16(audioAt + i * 2, true);
  const turn = view.getUint32(12, true);
  return {
    type,
    final: (flags & 1) === 1,
    index: view.getUint32(4, true),
    ptsMs: view.getUint32(8, true),
    turnId: turn === 0 ? null : turn,
    width: view.getUint16(16, true),
    height: view.getUint16(18, true),
    imageFormat: format === 1 ? 'rgb' : 'jpeg',
    image: flags & 2 ? bytes.slice(FRAME_HEADER_BYTES, FRAME_HEADER_BYTES + imageBytes) : undefined,
    audio,
  };
}
