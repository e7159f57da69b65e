/**
 * The room a call joins, behind one small interface: the embedded room (our signalling WebSocket
 * and one peer connection, embedded-transport.ts, bundled) or a LiveKit room (LiveKit's own
 * browser SDK, livekit-transport.ts, loaded on demand by livekit-loader.ts). The call's state
 * machine (call.ts) sees only this: the bot's tracks, the media path's state, session messages,
 * the server closing the room, and the end of the connection.
 */

/** What a room reports to its call. Called only after `join` resolved (events before are held). */
export interface RoomHandlers {
  /** A track of the bot (its audio, its video). */
  track(track: MediaStreamTrack): void;
  /**
   * The media path: `connected` (ICE connected; again after a recovery), `disconnected` (it may
   * recover: the call allows a grace), `failed` (gone for good).
   */
  peerState(state: 'connected' | 'disconnected' | 'failed'): void;
  /** A session message from the bot (a JSON object). */
  message(message: Record<string, unknown>): void;
  /**
   * The room's server could not set up this visitor's media (its peer connection or offer failed
   * on the server): no media will come; the service's fault, not the network's.
   */
  serverFailed(message: string): void;
  /** The server closed the room on purpose (before `disconnected`); the reason in words. */
  closed(reason: string): void;
  /** The room connection is gone (after `closed` when the server closed it). */
  disconnected(): void;
}

export interface JoinRequest {
  readonly url: string;
  readonly token: string;
  /** The visitor's microphone, already opened by the call (its constraints are the call's). */
  readonly microphone?: MediaStreamTrack;
  readonly handlers: RoomHandlers;
  /** Aborted when the call ends before the join resolved: the join gives up (and leaves). */
  readonly signal?: AbortSignal;
}

/** A joined room. */
export interface RoomTransport {
  /** Sends a session message to the bot; false when it could not be sent. */
  send(message: Record<string, unknown>): boolean;
  /** Leaves the room (idempotent); the handlers are not called any more. */
  leave(): void;
  /**
   * Whose fault a media path that could not be made is, when the room can tell: `ojin` when the
   * service's own side refused it (its TURN server refused the credential it handed out, or its
   * server had no port or relay to offer); null when it cannot tell.
   */
  iceFault?(): 'ojin' | null;
}

/** Joins a room; resolves once its signalling joined (the `signallingJoined` mark). */
export type JoinRoom = (request: JoinRequest) => Promise<RoomTransport>;

/** A join that failed, and `why`: `refused` by the room's server, or the `network` (unreachable, dropped). */
export class JoinFailure extends Error {
  constructor(
    readonly why: 'refused' | 'network',
    message: string,
  ) {
    super(message);
  }
}

export type RoomKind = 'embedded' | 'livekit';

/** The data packet topic of session messages in LiveKit rooms (the bot's `LIVEKIT_SESSION_TOPIC`). */
export const LIVEKIT_SESSION_TOPIC = 'session';

/** Which room a Session's `room_url` names: our signalling URL (`.../v1/rooms/signal?room=`) or a LiveKit server. */
export function roomKind(roomUrl: string): RoomKind | null {
  let url: URL;
  try {
    url = new URL(roomUrl);
  } catch {
    return null;
  }
  if (/\/v1\/rooms\/signal\/?$/.test(url.pathname) && url.searchParams.get('room')) return 'embedded';
  return ['ws:', 'wss:', 'http:', 'https:'].includes(url.protocol) ? 'livekit' : null;
}

/** The claims of a JWT, unverified (the server checks it; the page only reads it). */
function jwtClaims(token: string): Record<string, unknown> | null {
  const part = token.split('.')[1];
  if (!part) return null;
  try {
    const base64 = part.replace(/-/g, '+').replace(/_/g, '/').padEnd(Math.ceil(part.length / 4) * 4, '=');
    const bytes = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
    const claims: unknown = JSON.parse(new TextDecoder().decode(bytes));
    return claims && typeof claims === 'object' ? (claims as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/**
 * The room to release (`POST /v1/public/agents/connect/{room}`): the room_url's `room` parameter
 * (embedded rooms, and LiveKit rooms from this server since 2026-11-29); for a LiveKit room_url
 * without one (an older server), the `video.room` grant of the join token.
 */
export function roomNameOf(grant: { readonly room_url: string; readonly token: string }): string | null {
  const kind = roomKind(grant.room_url);
  if (kind === null) return null;
  const named = new URL(grant.room_url).searchParams.get('room');
  if (named || kind === 'embedded') return named;
  const video = jwtClaims(grant.token)?.video as { room?: unknown } | undefined;
  return typeof video?.room === 'string' && video.room ? video.room : null;
}
