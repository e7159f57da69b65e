/**
 * Where sessions get their rooms: one interface over the embedded provider and LiveKit, so the
 * Session API can create a room per session (room_url + token for the browser, publish settings
 * for the bot) and release it, whichever provider the deployment runs.
 */
import type { AvatarRoomSettings } from './publish-avatar.ts';
import type { CreatedRoom, RoomRegistry } from './room-registry.ts';

export interface AvatarRoom {
  readonly provider: 'embedded' | 'livekit';
  /** The room name (`POST /v1/public/agents/connect/{room}` takes it back). */
  readonly room: string;
  /** For the browser: where to join (the Session's `room_url`). */
  readonly roomUrl: string;
  /** For the browser: the Session's `token`. */
  readonly subscriberToken: string;
  /** For the bot: what to pass to `publishAvatar`. */
  readonly publisherSettings: AvatarRoomSettings;
  /** Clock time after which the tokens no longer admit anyone. */
  readonly expiresAtMs: number;
}

export interface RoomCreateOptions {
  readonly name?: string;
  /**
   * The service's address as the caller reached it (`https://host`): the embedded provider
   * points `roomUrl` at this host's signalling socket, so a room made for a request works from
   * wherever that request came. Without it, the provider's configured `signalUrl` is used.
   */
  readonly baseUrl?: string;
  readonly tokenTtlMs?: number;
  /** How long the room is used at most (the session's limit): TURN credentials expire with it. */
  readonly mediaTtlMs?: number;
}

export interface RoomProvider {
  readonly name: 'embedded' | 'livekit';
  /**
   * Creates a room (named `name` when given: the Session API passes names with 192 random bits);
   * rejects with `RoomError('room_creation_failed')` when the provider cannot.
   */
  createRoom(options?: RoomCreateOptions): Promise<AvatarRoom>;
  /** Ends the room for everyone; resolves whether a room was there to close. */
  closeRoom(room: string): Promise<boolean>;
}

export interface EmbeddedRoomProviderOptions {
  /** Public address of the signalling socket, e.g. `wss://avatar.example.com/v1/rooms/signal`. */
  readonly signalUrl: string;
}

/** `https://host[:port]` + the configured socket path, as `wss://host[:port]/path`. */
function signalUrlFor(baseUrl: string, configured: string): URL {
  const base = new URL(baseUrl);
  const url = new URL(new URL(configured).pathname, base);
  url.protocol = base.protocol === 'https:' ? 'wss:' : 'ws:';
  return url;
}

/**
 * An embedded room as a session's room: `roomUrl` is the signalling socket (`signalUrl`, on the
 * caller's host when `baseUrl` is given) with the room's name, which is not a secret; the token
 * never goes in the URL.
 */
export function embeddedAvatarRoom(created: CreatedRoom, signalUrl: string, baseUrl?: string): AvatarRoom {
  const url = baseUrl ? signalUrlFor(baseUrl, signalUrl) : new URL(signalUrl);
  url.searchParams.set('room', created.room);
  return {
    provider: 'embedded',
    room: created.room,
    roomUrl: url.toString(),
    subscriberToken: created.subscriberToken,
    publisherSettings: { provider: 'embedded', room: created.room, token: created.publisherToken },
    expiresAtMs: created.expiresAtMs,
  };
}

export class EmbeddedRoomProvider implements RoomProvider {
  readonly name = 'embedded' as const;

  constructor(
    readonly rooms: RoomRegistry,
    private readonly options: EmbeddedRoomProviderOptions,
  ) {}

  async createRoom(options: RoomCreateOptions = {}): Promise<AvatarRoom> {
    const created = this.rooms.createRoom({
      ...(options.name === undefined ? {} : { name: options.name }),
      ...(options.tokenTtlMs === undefined ? {} : { tokenTtlMs: options.tokenTtlMs }),
      ...(options.mediaTtlMs === undefined ? {} : { mediaTtlMs: options.mediaTtlMs }),
    });
    return embeddedAvatarRoom(created, this.options.signalUrl, options.baseUrl);
  }

  async closeRoom(room: string): Promise<boolean> {
    return this.rooms.closeRoom(room, 'session released');
  }
}
