/**
 * Embedded rooms behind the real signalling WebSocket, on a bare HTTP server of their own (no
 * REST, no Session API): what bot tests need to start bots in rooms and join them as visitors.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { attachRoomSignalling } from '../../server/rooms/room-signalling.ts';
import { EmbeddedRoomProvider, RoomRegistry } from '../../transports/webrtc/index.ts';

export interface EmbeddedSignalling {
  readonly rooms: RoomRegistry;
  /** Makes rooms whose signalling URL is this server's. */
  readonly provider: EmbeddedRoomProvider;
  /** Closes every room, the signalling sockets and the server. */
  close(): Promise<void>;
}

export async function startEmbeddedSignalling(rooms = new RoomRegistry()): Promise<EmbeddedSignalling> {
  const http = createServer((_req, res) => res.writeHead(404).end());
  const signalling = attachRoomSignalling(http, { rooms });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const provider = new EmbeddedRoomProvider(rooms, { signalUrl: `ws://127.0.0.1:${(http.address() as AddressInfo).port}/v1/rooms/signal` });
  return {
    rooms,
    provider,
    async close() {
      rooms.closeAll();
      await signalling.close();
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
