/**
 * LiveKit rooms for sessions: creates the room through LiveKit's server API (so an unreachable
 * or refusing server is a clear `room_creation_failed` at session start, not a silent failure
 * later), and mints two join tokens: one for the avatar (publishes) and one for the browser
 * (subscribes and publishes its microphone). Closing deletes the room, which disconnects everyone.
 */
import { livekitBotIdentity } from '../../protocol/session-messages.ts';
import { resolveOptions } from '../../core/options.ts';
import { randomUUID } from 'node:crypto';
import { AccessToken, RoomServiceClient, TrackSource } from 'livekit-server-sdk';
import { RealClock, type Clock } from '../../core/clock.ts';
import { RoomError } from '../webrtc/room-errors.ts';
import type { AvatarRoom, RoomCreateOptions, RoomProvider } from '../webrtc/room-provider.ts';
import { errorMessage } from '../../core/error-message.ts';

export const LIVEKIT_ROOM_DEFAULTS = {
  /** Join tokens' lifetime. */
  tokenTtlMs: 10 * 60_000,
  /** LiveKit closes a room this long after it became empty (seconds in LiveKit's API). */
  emptyTimeoutMs: 60_000,
  /** The avatar and one user, plus room for a reconnect overlap. */
  maxParticipants: 4,
} as const;

export interface LiveKitRoomProviderOptions {
  /** `wss://` address of the LiveKit server (the API is reached at its http(s) form). */
  readonly url: string;
  readonly apiKey: string;
  readonly apiSecret: string;
  readonly tokenTtlMs?: number;
  readonly emptyTimeoutMs?: number;
  readonly maxParticipants?: number;
  readonly clock?: Clock;
}

export class LiveKitRoomProvider implements RoomProvider {
  readonly name = 'livekit' as const;
  private readonly api: RoomServiceClient;
  private readonly clock: Clock;
  /** LIVEKIT_ROOM_DEFAULTS with the options over them. */
  private readonly settings: { tokenTtlMs: number; emptyTimeoutMs: number; maxParticipants: number };

  constructor(private readonly options: LiveKitRoomProviderOptions) {
    if (!/^wss?:\/\//.test(options.url)) throw new RoomError('invalid_settings', 'the LiveKit url must start with ws:// or wss://');
    this.api = new RoomServiceClient(options.url.replace(/^ws/, 'http'), options.apiKey, options.apiSecret, { failover: false });
    this.clock = options.clock ?? new RealClock();
    this.settings = resolveOptions(LIVEKIT_ROOM_DEFAULTS, { tokenTtlMs: options.tokenTtlMs, emptyTimeoutMs: options.emptyTimeoutMs, maxParticipants: options.maxParticipants });
  }

  async createRoom(options: RoomCreateOptions = {}): Promise<AvatarRoom> {
    const room = options.name ?? `room_${randomUUID().replaceAll('-', '')}`;
    try {
      await this.api.createRoom({
        name: room,
        emptyTimeout: Math.ceil(this.settings.emptyTimeoutMs / 1000),
        maxParticipants: this.settings.maxParticipants,
      });
    } catch (error) {
      throw new RoomError('room_creation_failed', `LiveKit did not create the room: ${errorMessage(error)}`);
    }
    const ttlMs = options.tokenTtlMs ?? this.settings.tokenTtlMs;
    const publisherToken = await this.token(room, livekitBotIdentity(room), ttlMs, {
      canPublish: true,
      canSubscribe: true,
      canPublishSources: [TrackSource.CAMERA, TrackSource.MICROPHONE],
    });
    const subscriberToken = await this.token(room, `user-${randomUUID()}`, ttlMs, {
      canPublish: true,
      canSubscribe: true,
      canPublishSources: [TrackSource.MICROPHONE],
    });
    return {
      provider: 'livekit',
      room,
      roomUrl: roomUrlOf(this.options.url, room),
      subscriberToken,
      publisherSettings: { provider: 'livekit', url: this.options.url, token: publisherToken },
      expiresAtMs: this.clock.now() + ttlMs,
    };
  }

  async closeRoom(room: string): Promise<boolean> {
    try {
      await this.api.deleteRoom(room);
      return true;
    } catch (error) {
      if ((error as { status?: number }).status === 404) return false;
      throw new RoomError('room_closed', `LiveKit did not delete room ${room}: ${errorMessage(error)}`);
    }
  }

  private async token(room: string, identity: string, ttlMs: number, grant: { canPublish: boolean; canSubscribe: boolean; canPublishSources: TrackSource[] }): Promise<string> {
    const token = new AccessToken(this.options.apiKey, this.options.apiSecret, { identity, ttl: Math.ceil(ttlMs / 1000) });
    token.addGrant({ roomJoin: true, room, ...grant });
    return token.toJwt();
  }
}

/**
 * The Session's `room_url` for a LiveKit room: the server's URL with the room's name as its `room`
 * parameter, as an embedded room's URL carries it, so that a client finds the room to release
 * (`POST /v1/public/agents/connect/{room}`, "the room name taken from the room_url") in the URL,
 * as the spec says. LiveKit's SDKs keep a URL's parameters when they add their own (`/rtc?...`),
 * and the server ignores parameters it does not know.
 */
export function roomUrlOf(serverUrl: string, room: string): string {
  const url = new URL(serverUrl);
  url.searchParams.set('room', room);
  return url.toString();
}
