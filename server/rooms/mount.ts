/**
 * Mounts the embedded WebRTC rooms on a REST server: one room registry per server, the
 * signalling WebSocket (/v1/rooms/signal), the browser client script (GET /v1/rooms/client.js)
 * and the publisher the /realtime endpoint uses for its `webrtc` message. The Session API
 * creates rooms in `rooms`; a bot developer embedding the server may create them directly.
 */
import type { AppServer } from '../app.ts';
import { createAvatarPublisher, RoomRegistry, type RoomRegistryOptions } from '../../transports/webrtc/index.ts';
import type { AvatarPublisher } from '../realtime/realtime-endpoint.ts';
import { attachRoomSignalling, type AttachedRoomSignalling } from './room-signalling.ts';
import { ROOM_CLIENT_PATH, roomClientScript } from './room-client-script.ts';

export interface MountedRooms {
  readonly rooms: RoomRegistry;
  readonly signalling: AttachedRoomSignalling;
  /** Pass to `mountRealtime(server, { publishAvatar })`. */
  readonly publishAvatar: AvatarPublisher;
  /** Closes every room (participants are told) and the signalling socket. */
  close(): Promise<void>;
}

export interface MountRoomsOptions extends RoomRegistryOptions {
  /** How often rooms left empty are swept (ms). Default 30 s. */
  readonly sweepIntervalMs?: number;
}

export function mountRooms(server: Pick<AppServer, 'httpServer' | 'router' | 'logger'> & { readonly config?: Pick<AppServer['config'], 'iceAllowedRanges'> }, options: MountRoomsOptions = {}): MountedRooms {
  const rooms = new RoomRegistry({ iceAllowedRanges: server.config?.iceAllowedRanges, ...options });
  const signalling = attachRoomSignalling(server.httpServer, {
    rooms,
    log: (event, details) => server.logger.info(details, event),
  });
  // The router is mounted under /v1; the client script is public (it holds no secret).
  const routePath = ROOM_CLIENT_PATH.replace(/^\/v1/, '');
  server.router.get(routePath, (ctx) => {
    ctx.type = 'text/javascript; charset=utf-8';
    ctx.set('Cache-Control', 'public, max-age=300');
    ctx.set('Access-Control-Allow-Origin', '*');
    ctx.body = roomClientScript();
  });
  const sweeper = setInterval(() => rooms.sweep(), options.sweepIntervalMs ?? 30_000);
  sweeper.unref();
  return {
    rooms,
    signalling,
    publishAvatar: createAvatarPublisher({ rooms }),
    async close() {
      clearInterval(sweeper);
      rooms.closeAll();
      await signalling.close();
    },
  };
}
