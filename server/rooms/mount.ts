/**
 * The embedded WebRTC rooms of a server: one room registry, the signalling socket's upgrade
 * handler (the builder puts it in the upgrade table at /v1/rooms/signal), the browser client
 * script (GET /v1/rooms/client.js) and the publisher the /realtime endpoint uses for its `webrtc`
 * message. The Session API creates rooms in `rooms`; a bot developer embedding the server may
 * create them directly.
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { RtcNetworkSettings } from '../../transports/webrtc/rtc-network.ts';
import { createAvatarPublisher, RoomRegistry, type RoomRegistryOptions } from '../../transports/webrtc/index.ts';
import type { HttpHost } from '../http/http-app.ts';
import type { AvatarPublisher } from '../realtime/realtime-endpoint.ts';
import { createRoomSignallingHandler, ROOM_SIGNALLING_DEFAULTS, type SignallingDelegate } from './room-signalling.ts';
import { ROOM_CLIENT_PATH, roomClientScript } from './room-client-script.ts';

export interface MountedRooms {
  readonly rooms: RoomRegistry;
  readonly signalling: {
    /** Path of the signalling socket in the upgrade table. */
    readonly path: string;
    /** Serves a signalling upgrade: a room of another process (`delegateTo`) is handed over, the rest served here. */
    handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void;
    /** Hands upgrades for rooms of another process (the bot host) to `delegate` from now on (null: none). */
    delegateTo(delegate: SignallingDelegate | null): void;
    readonly connections: number;
  };
  /** Pass to `mountRealtime(server, { publishAvatar })`. */
  readonly publishAvatar: AvatarPublisher;
  /** Closes every room (participants are told) and the signalling connections. */
  close(): Promise<void>;
}

export interface MountRoomsOptions extends RoomRegistryOptions {
  /** How often rooms left empty are swept (ms). Default 30 s. */
  readonly sweepIntervalMs?: number;
}

export function mountRooms(
  host: Pick<HttpHost, 'api' | 'router'> & { readonly logger: { info(details: object, event: string): void }; readonly config?: { readonly iceAllowedRanges?: readonly string[]; readonly rtc?: RtcNetworkSettings } },
  options: MountRoomsOptions = {},
): MountedRooms {
  // Visitors' ICE candidates go through the address policy (SVC_ICE_ALLOWED_RANGES: transports/webrtc/remote-candidates.ts).
  const rooms = new RoomRegistry({ iceAllowedRanges: host.config?.iceAllowedRanges, ...(host.config?.rtc ? { network: host.config.rtc } : {}), ...options });
  const handler = createRoomSignallingHandler({ rooms, log: (event, details) => host.logger.info(details, event) });
  let delegate: SignallingDelegate | null = null;
  // The /v1 router's path; the client script is public (it holds no secret).
  host.api.add(host.router, {
    method: 'get', path: ROOM_CLIENT_PATH.replace(/^\/v1/, ''), operationId: 'getRoomClient', tag: 'Rooms', auth: 'public',
    summary: 'The browser client of embedded rooms (signalling and WebRTC; docs/webrtc.md)',
    responses: { 200: { description: 'JavaScript', contentType: 'text/javascript' } },
  }, async ({ ctx }) => {
    ctx.type = 'text/javascript; charset=utf-8';
    return { status: 200, body: roomClientScript(), headers: { 'Cache-Control': 'public, max-age=300', 'Access-Control-Allow-Origin': '*' } };
  });
  const sweeper = setInterval(() => rooms.sweep(), options.sweepIntervalMs ?? 30_000);
  sweeper.unref();
  return {
    rooms,
    signalling: {
      path: ROOM_SIGNALLING_DEFAULTS.path,
      handleUpgrade(req, socket, head) {
        const room = new URL(req.url ?? '/', 'http://localhost').searchParams.get('room');
        if (delegate && room && delegate.owns(room)) delegate.forward(req, socket, head);
        else handler.handleUpgrade(req, socket, head);
      },
      delegateTo(next) {
        delegate = next;
      },
      get connections() {
        return handler.connections;
      },
    },
    publishAvatar: createAvatarPublisher({ rooms }),
    async close() {
      clearInterval(sweeper);
      rooms.closeAll();
      await handler.close();
    },
  };
}
