/**
 * A wire contract (protocol/): the embedded rooms' signalling protocol, JSON text messages over
 * one WebSocket per participant (docs/webrtc.md), spoken by the server (transports/webrtc,
 * server/rooms) and the browser room client (transports/webrtc/room-client.js). The server side
 * offers (it owns the avatar's tracks), the browser answers; ICE candidates trickle both ways. Every message a client can send is parsed here into a typed
 * value or refused with a `SignallingError` naming what was wrong.
 */
import { SESSION_MESSAGE_LIMITS } from './session-messages.ts';

export const SIGNALLING_LIMITS = {
  /** Text messages above this get `message_too_large` (SDP offers/answers are a few KiB). */
  maxMessageBytes: 64 * 1024,
  /** The socket layer closes connections sending more than this in one message (1009). */
  hardMaxPayloadBytes: 256 * 1024,
  /** Messages per second before `rate_limited` (a trickle of ICE candidates is far below it). */
  maxMessagesPerSecond: 50,
  /** A connection that has not joined within this time is closed with `join_timeout`. */
  joinTimeoutMs: 10_000,
  /** Longest accepted room name, token, SDP and candidate strings. */
  maxRoomNameLength: 128,
  maxTokenLength: 256,
  maxSdpLength: 32 * 1024,
  maxCandidateLength: 1024,
  /** Largest `client_message` payload (its JSON), the session protocol's client message limit. */
  maxClientMessageBytes: SESSION_MESSAGE_LIMITS.maxClientMessageBytes,
} as const;

export const SIGNALLING_PROTOCOL_VERSION = 1;

export type SignallingErrorCode =
  | 'auth_failed'
  | 'malformed_message'
  | 'message_too_large'
  | 'not_joined'
  | 'already_joined'
  | 'unknown_peer'
  | 'negotiation_failed'
  | 'rate_limited'
  | 'room_full'
  | 'room_closed'
  | 'join_timeout'
  | 'replaced'
  | 'ice_unavailable'
  | 'internal_error';

/** WebSocket close codes for fatal errors (4xxx = application codes). */
export const SIGNALLING_CLOSE_CODES: Partial<Record<SignallingErrorCode, number>> = {
  auth_failed: 4401,
  join_timeout: 4408,
  replaced: 4409,
  room_closed: 4410,
  room_full: 4429,
  /** Fatal only at `join`: one token rejoining faster than ROOM_JOIN_LIMITS allow. */
  rate_limited: 4429,
  internal_error: 1011,
};

export class SignallingError extends Error {
  constructor(
    readonly code: SignallingErrorCode,
    message: string,
    readonly fatal = false,
  ) {
    super(message);
    this.name = 'SignallingError';
  }
}

/** The shape of `RTCIceCandidateInit` carried on the wire; null means end of candidates. */
export interface IceCandidateWire {
  readonly candidate: string;
  readonly sdpMid: string | null;
  readonly sdpMLineIndex: number | null;
  readonly usernameFragment?: string | null;
}

export type SignallingClientMessage =
  | { readonly type: 'join'; readonly room?: string; readonly token: string }
  | { readonly type: 'answer'; readonly pc_id: string; readonly sdp: string }
  | { readonly type: 'candidate'; readonly pc_id: string; readonly candidate: IceCandidateWire | null }
  /** The client's side of the peer connection went `disconnected`/`failed`: the server re-offers with an ICE restart. */
  | { readonly type: 'restart_ice'; readonly pc_id: string }
  | { readonly type: 'leave' }
  | { readonly type: 'ping'; readonly t?: number }
  /** A message for the bot (the session protocol's client messages: `client-ready`, `hang-up`, ...). */
  | { readonly type: 'client_message'; readonly message: Readonly<Record<string, unknown>> };

export interface PublisherInfo {
  readonly participant_id: string;
  readonly tracks: readonly { readonly kind: 'audio' | 'video'; readonly track_id: string }[];
}

export type SignallingServerMessage =
  | {
      readonly type: 'joined';
      readonly room: string;
      readonly participant_id: string;
      readonly publisher: PublisherInfo | null;
      readonly protocol_version: number;
      /** STUN/TURN servers for the client's peer connections (a TURN credential minted for this join). */
      readonly ice_servers: readonly RTCIceServer[];
      readonly ice_transport_policy: 'all' | 'relay';
    }
  | { readonly type: 'offer'; readonly pc_id: string; readonly publisher_id: string; readonly sdp: string }
  | { readonly type: 'candidate'; readonly pc_id: string; readonly candidate: IceCandidateWire | null }
  | { readonly type: 'unpublished'; readonly pc_id: string | null; readonly publisher_id: string }
  | { readonly type: 'pong'; readonly t: number }
  /** A message from the bot to the room's clients (tool calls in client mode, transcripts). */
  | { readonly type: 'app_message'; readonly publisher_id: string; readonly message: Readonly<Record<string, unknown>> }
  | { readonly type: 'error'; readonly code: SignallingErrorCode; readonly message: string; readonly fatal: boolean }
  | { readonly type: 'closed'; readonly reason: string };

const malformed = (message: string) => new SignallingError('malformed_message', message);

function boundedString(value: unknown, field: string, max: number, allowEmpty = false): string {
  if (typeof value !== 'string') throw malformed(`\`${field}\` must be a string`);
  if (!allowEmpty && value.length === 0) throw malformed(`\`${field}\` must not be empty`);
  if (value.length > max) throw malformed(`\`${field}\` is longer than ${max} characters`);
  return value;
}

function parseCandidate(value: unknown): IceCandidateWire | null {
  if (value === null) return null;
  if (!value || typeof value !== 'object' || Array.isArray(value)) throw malformed('`candidate` must be an object or null');
  const c = value as Record<string, unknown>;
  const candidate = boundedString(c.candidate, 'candidate.candidate', SIGNALLING_LIMITS.maxCandidateLength, true);
  const sdpMid = c.sdpMid === undefined || c.sdpMid === null ? null : boundedString(c.sdpMid, 'candidate.sdpMid', 64, true);
  const index = c.sdpMLineIndex;
  if (index !== undefined && index !== null && !(Number.isInteger(index) && (index as number) >= 0 && (index as number) < 64)) {
    throw malformed('`candidate.sdpMLineIndex` must be a small non-negative integer or null');
  }
  if (sdpMid === null && (index === undefined || index === null)) throw malformed('a candidate needs `sdpMid` or `sdpMLineIndex`');
  const ufrag = c.usernameFragment;
  if (ufrag !== undefined && ufrag !== null && typeof ufrag !== 'string') throw malformed('`candidate.usernameFragment` must be a string or null');
  return { candidate, sdpMid, sdpMLineIndex: (index as number | null | undefined) ?? null, usernameFragment: (ufrag as string | null | undefined) ?? null };
}

/** Parses one text message from a participant. Throws `SignallingError` (never anything else). */
export function parseSignallingMessage(text: string): SignallingClientMessage {
  if (Buffer.byteLength(text, 'utf8') > SIGNALLING_LIMITS.maxMessageBytes) {
    throw new SignallingError('message_too_large', `messages are limited to ${SIGNALLING_LIMITS.maxMessageBytes} bytes`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw malformed('messages must be JSON objects');
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) throw malformed('messages must be JSON objects');
  const m = value as Record<string, unknown>;
  switch (m.type) {
    case 'join': {
      const room = m.room === undefined ? undefined : boundedString(m.room, 'room', SIGNALLING_LIMITS.maxRoomNameLength);
      const token = boundedString(m.token, 'token', SIGNALLING_LIMITS.maxTokenLength);
      return room === undefined ? { type: 'join', token } : { type: 'join', room, token };
    }
    case 'answer':
      return { type: 'answer', pc_id: boundedString(m.pc_id, 'pc_id', 64), sdp: boundedString(m.sdp, 'sdp', SIGNALLING_LIMITS.maxSdpLength) };
    case 'candidate':
      if (!('candidate' in m)) throw malformed('`candidate` is required (null ends the candidates)');
      return { type: 'candidate', pc_id: boundedString(m.pc_id, 'pc_id', 64), candidate: parseCandidate(m.candidate) };
    case 'restart_ice':
      return { type: 'restart_ice', pc_id: boundedString(m.pc_id, 'pc_id', 64) };
    case 'leave':
      return { type: 'leave' };
    case 'client_message': {
      const message = m.message;
      if (!message || typeof message !== 'object' || Array.isArray(message)) throw malformed('`message` must be a JSON object');
      // Measured on its own serialisation: the envelope is not part of the limit.
      if (Buffer.byteLength(JSON.stringify(message), 'utf8') > SIGNALLING_LIMITS.maxClientMessageBytes) {
        throw new SignallingError('message_too_large', `client messages are limited to ${SIGNALLING_LIMITS.maxClientMessageBytes} bytes of JSON`);
      }
      return { type: 'client_message', message: message as Readonly<Record<string, unknown>> };
    }
    case 'ping': {
      if (m.t !== undefined && typeof m.t !== 'number') throw malformed('`t` must be a number');
      return m.t === undefined ? { type: 'ping' } : { type: 'ping', t: m.t as number };
    }
    default:
      throw malformed(typeof m.type === 'string' ? `unknown message type \`${m.type.slice(0, 40)}\`` : 'messages need a string `type`');
  }
}
