/**
 * A real Debian chromium for the room tests (playwright-core, fresh profile per launch), plus a
 * localhost HTTP server that serves a blank page, the room client script and the signalling
 * WebSocket, like the product server does.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { launchChromiumWith, type Chromium } from '../support/chromium.ts';
import { attachRoomSignalling, serveRoomClient, ROOM_CLIENT_PATH, type RoomSignalling } from '../../server/rooms/index.ts';
import type { RoomRegistry } from '../../transports/webrtc/index.ts';

export { CHROMIUM_PATH } from '../support/chromium.ts';
export type Browser = Chromium;

/** `extraArgs` e.g. `--use-fake-device-for-media-stream` for a fake microphone (a periodic beep). */
export async function launchChromium(extraArgs: readonly string[] = []): Promise<Browser> {
  return launchChromiumWith({ args: ['--use-fake-ui-for-media-stream', '--autoplay-policy=no-user-gesture-required', ...extraArgs] });
}

export interface RoomTestServer {
  readonly httpUrl: string;
  readonly signalUrl: string;
  readonly server: Server;
  readonly signalling: RoomSignalling;
  close(): Promise<void>;
}

const PAGE = `<!doctype html><html><head><meta charset="utf-8"><title>room test</title>
<script src="${ROOM_CLIENT_PATH}"></script></head><body><video id="avatar" autoplay playsinline></video></body></html>`;

export async function startRoomServer(rooms: RoomRegistry, options: { readonly joinTimeoutMs?: number; readonly heartbeatIntervalMs?: number; readonly maxMessagesPerSecond?: number } = {}): Promise<RoomTestServer> {
  const server = createServer((req, res) => {
    if (serveRoomClient(req, res)) return;
    if (req.url === '/' || req.url === '/index.html') {
      res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
      res.end(PAGE);
      return;
    }
    res.writeHead(404).end();
  });
  const signalling = attachRoomSignalling(server, { rooms, ...options });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    httpUrl: `http://127.0.0.1:${port}/`,
    signalUrl: `ws://127.0.0.1:${port}/v1/rooms/signal`,
    server,
    signalling,
    async close() {
      await signalling.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
