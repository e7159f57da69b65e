/**
 * The embedded room provider's bookkeeping: rooms by name and the tokens that admit
 * participants. A token is an opaque random string bound to one room and one role (`publisher`
 * for the avatar, `subscriber` for a browser); only its SHA-256 is kept. Tokens are short-lived
 * for joining (default 10 minutes): a connection that joined in time stays in the room until it
 * leaves or the room closes.
 */
import { resolveOptions } from '../../core/options.ts';
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { RealClock, type Clock } from '../../core/clock.ts';
import { Room } from './room.ts';
import { RoomError } from './room-errors.ts';
import { SIGNALLING_LIMITS } from '../../protocol/room-signalling.ts';
import { AddressPolicy } from '../../processors/tools/address-policy.ts';
import type { RemoteCandidateScreenOptions } from './remote-candidates.ts';
import { checkRtcNetwork, iceServerAddresses, RTC_NETWORK_DEFAULTS, type RtcNetworkSettings } from './rtc-network.ts';

export const ROOM_REGISTRY_DEFAULTS = {
  /** How long a token can be used to join (publish or subscribe) after it was issued. */
  tokenTtlMs: 10 * 60_000,
  /** Browsers per room (a session has one; a few more allow a reconnect overlap or an observer). */
  maxSubscribersPerRoom: 4,
  /** Rooms open at once in this process. */
  maxRooms: 1000,
  /**
   * A room nobody has used (no publisher, no subscriber) for this long is closed when rooms are
   * next created or swept: a session that never released its room does not keep it forever.
   */
  emptyRoomTimeoutMs: 10 * 60_000,
} as const;

export type RoomRole = 'publisher' | 'subscriber';

export interface RoomGrant {
  /** Identifies the token (not the token itself): a second join with it replaces the first. */
  readonly grantId: string;
  readonly room: string;
  readonly role: RoomRole;
  readonly expiresAtMs: number;
}

/** What creating a room hands back: the name and one token per role. */
export interface CreatedRoom {
  readonly room: string;
  readonly publisherToken: string;
  readonly subscriberToken: string;
  /** Clock time after which both tokens no longer admit anyone. */
  readonly expiresAtMs: number;
}

export interface RoomRegistryOptions {
  readonly clock?: Clock;
  readonly tokenTtlMs?: number;
  readonly maxSubscribersPerRoom?: number;
  readonly maxRooms?: number;
  readonly emptyRoomTimeoutMs?: number;
  /** ICE servers for the server's peer connections; default none (host candidates only). */
  readonly iceServers?: readonly RTCIceServer[];
  /**
   * Non-public ranges (CIDRs) a visitor's ICE candidates may name (`SVC_ICE_ALLOWED_RANGES`);
   * none by default: public unicast only (remote-candidates.ts says why visitors still connect).
   */
  readonly iceAllowedRanges?: readonly string[];
  /** Remote candidates admitted per peer connection (REMOTE_CANDIDATE_DEFAULTS). */
  readonly maxRemoteCandidates?: number;
  /**
   * STUN/TURN for both sides, TURN credentials, announced address, port range, relay policy
   * (rtc-network.ts; `SVC_ICE_SERVERS`, `SVC_TURN_*`, `SVC_RTC_*`, `SVC_ICE_TRANSPORT_POLICY`).
   * The addresses of its servers are admitted in visitors' candidates (their relay candidates).
   */
  readonly network?: RtcNetworkSettings;
}

const ROOM_NAME = /^[A-Za-z0-9_-]{1,128}$/;

function hashToken(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

export class RoomRegistry {
  private readonly clock: Clock;
  private readonly tokenTtlMs: number;
  private readonly maxSubscribers: number;
  private readonly maxRooms: number;
  private readonly emptyRoomTimeoutMs: number;
  private readonly iceServers: readonly RTCIceServer[];
  private readonly network: RtcNetworkSettings;
  private readonly remoteCandidates: RemoteCandidateScreenOptions;
  private readonly rooms = new Map<string, Room>();
  private readonly grants = new Map<string, RoomGrant>();

  constructor(options: RoomRegistryOptions = {}) {
    this.clock = options.clock ?? new RealClock();
    const settings = resolveOptions(ROOM_REGISTRY_DEFAULTS, {
      tokenTtlMs: options.tokenTtlMs,
      maxSubscribersPerRoom: options.maxSubscribersPerRoom,
      maxRooms: options.maxRooms,
      emptyRoomTimeoutMs: options.emptyRoomTimeoutMs,
    });
    this.tokenTtlMs = settings.tokenTtlMs;
    this.maxSubscribers = settings.maxSubscribersPerRoom;
    this.maxRooms = settings.maxRooms;
    this.emptyRoomTimeoutMs = settings.emptyRoomTimeoutMs;
    this.iceServers = options.iceServers ?? [];
    this.network = options.network ?? RTC_NETWORK_DEFAULTS;
    checkRtcNetwork(this.network);
    this.remoteCandidates = {
      policy: new AddressPolicy([...(options.iceAllowedRanges ?? []), ...iceServerAddresses(this.network)]),
      ...(options.maxRemoteCandidates !== undefined ? { maxRemoteCandidates: options.maxRemoteCandidates } : {}),
    };
  }

  /** Opens a room (a fresh random name unless one is given) with a publisher and a subscriber token. */
  createRoom(options: { readonly name?: string; readonly tokenTtlMs?: number; /** How long the room is used at most (a session's limit): TURN credentials expire with it. */ readonly mediaTtlMs?: number } = {}): CreatedRoom {
    this.sweep();
    const name = options.name ?? `room_${randomUUID().replaceAll('-', '')}`;
    if (!ROOM_NAME.test(name) || name.length > SIGNALLING_LIMITS.maxRoomNameLength) throw new RoomError('invalid_settings', 'room names are 1 to 128 letters, digits, `_` or `-`');
    if (this.rooms.has(name)) throw new RoomError('invalid_settings', `room ${name} already exists`);
    if (this.rooms.size >= this.maxRooms) throw new RoomError('invalid_settings', `this server already has ${this.maxRooms} rooms open`);
    this.rooms.set(
      name,
      new Room(name, {
        maxSubscribers: this.maxSubscribers,
        iceServers: this.iceServers,
        network: this.network,
        mediaUntilMs: options.mediaTtlMs === undefined ? null : Date.now() + options.mediaTtlMs,
        remoteCandidates: this.remoteCandidates,
        now: () => this.clock.now(),
      }),
    );
    const ttl = options.tokenTtlMs ?? this.tokenTtlMs;
    const publisherToken = this.issueToken(name, 'publisher', ttl);
    const subscriberToken = this.issueToken(name, 'subscriber', ttl);
    return { room: name, publisherToken, subscriberToken, expiresAtMs: this.clock.now() + ttl };
  }

  /** Another token for an open room (e.g. a second viewer, or a fresh one for a reconnect). */
  issueToken(room: string, role: RoomRole, ttlMs: number = this.tokenTtlMs): string {
    if (!this.rooms.get(room) || this.rooms.get(room)!.closed) throw new RoomError('room_closed', `room ${room} is not open`);
    const token = `rt_${randomBytes(32).toString('base64url')}`;
    this.grants.set(hashToken(token), { grantId: randomUUID(), room, role, expiresAtMs: this.clock.now() + ttlMs });
    return token;
  }

  /**
   * Checks a token for a room and role. Every refusal is the same `auth_failed` (unknown room,
   * wrong token, wrong role, expired), so a caller learns nothing about rooms it holds no token for.
   */
  authorize(room: string | undefined, token: string, role: RoomRole): { readonly room: Room; readonly grant: RoomGrant } {
    const grant = this.grants.get(hashToken(token));
    const refused = () => new RoomError('auth_failed', 'the room token is not valid for this room');
    if (!grant || grant.role !== role || (room !== undefined && grant.room !== room)) throw refused();
    if (this.clock.now() >= grant.expiresAtMs) throw refused();
    const found = this.rooms.get(grant.room);
    if (!found || found.closed) throw refused();
    return { room: found, grant };
  }

  get(room: string): Room | undefined {
    return this.rooms.get(room);
  }

  get size(): number {
    return this.rooms.size;
  }

  /** Closes a room and revokes its tokens. Returns whether an open room was closed. */
  closeRoom(room: string, reason = 'room closed'): boolean {
    const found = this.rooms.get(room);
    if (!found) return false;
    this.rooms.delete(room);
    for (const [hash, grant] of this.grants) if (grant.room === room) this.grants.delete(hash);
    const wasOpen = !found.closed;
    found.close(reason);
    return wasOpen;
  }

  closeAll(reason = 'server shutting down'): void {
    for (const name of [...this.rooms.keys()]) this.closeRoom(name, reason);
  }

  /**
   * Forgets expired tokens and closes rooms left empty longer than `emptyRoomTimeoutMs`. Runs on
   * every `createRoom`; a server may also call it on a timer. Returns the rooms it closed.
   */
  sweep(): string[] {
    const now = this.clock.now();
    for (const [hash, grant] of this.grants) if (now >= grant.expiresAtMs) this.grants.delete(hash);
    const idle = [...this.rooms.values()].filter((r) => r.emptySinceMs !== null && now - r.emptySinceMs >= this.emptyRoomTimeoutMs).map((r) => r.name);
    for (const name of idle) this.closeRoom(name, 'room unused');
    return idle;
  }
}
