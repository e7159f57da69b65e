/**
 * Serves the browser room client (transports/webrtc/room-client.js) at GET /v1/rooms/client.js.
 * Plain Node request handling so it mounts on any router: Koa users call it from a route.
 */
import { readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';

export const ROOM_CLIENT_PATH = '/v1/rooms/client.js';

let script: string | undefined;

/** The client script's source (read once). */
export function roomClientScript(): string {
  script ??= readFileSync(new URL('../../transports/webrtc/room-client.js', import.meta.url), 'utf8');
  return script;
}

/** Answers GET/HEAD of the client script; returns false for any other request (left to the caller). */
export function serveRoomClient(req: IncomingMessage, res: ServerResponse, path: string = ROOM_CLIENT_PATH): boolean {
  const url = new URL(req.url ?? '/', 'http://localhost');
  if (url.pathname !== path || (req.method !== 'GET' && req.method !== 'HEAD')) return false;
  const body = roomClientScript();
  res.writeHead(200, {
    'Content-Type': 'text/javascript; charset=utf-8',
    'Content-Length': Buffer.byteLength(body),
    'Cache-Control': 'public, max-age=300',
    'Access-Control-Allow-Origin': '*',
  });
  res.end(req.method === 'HEAD' ? undefined : body);
  return true;
}
