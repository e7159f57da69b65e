/**
 * A local stand-in for LiveKit's server API (Twirp over HTTP, JSON): CreateRoom and DeleteRoom
 * of `livekit.RoomService`, with the real authentication (HS256 JWT signed with the API secret,
 * `roomCreate` grant) checked by livekit-server-sdk's own TokenVerifier. Errors use Twirp's
 * shape `{code, msg}`.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { TokenVerifier } from 'livekit-server-sdk';

export interface FakeLiveKitRoom {
  readonly name: string;
  readonly emptyTimeout: number;
  readonly maxParticipants: number;
}

export interface FakeLiveKitApi {
  readonly url: string;
  readonly rooms: Map<string, FakeLiveKitRoom>;
  readonly requests: string[];
  close(): Promise<void>;
}

function twirpError(res: ServerResponse, status: number, code: string, msg: string): void {
  res.writeHead(status, { 'Content-Type': 'application/json' }).end(JSON.stringify({ code, msg }));
}

async function body(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as Record<string, unknown>;
}

export async function startFakeLiveKitApi(apiKey: string, apiSecret: string): Promise<FakeLiveKitApi> {
  const verifier = new TokenVerifier(apiKey, apiSecret);
  const rooms = new Map<string, FakeLiveKitRoom>();
  const requests: string[] = [];
  const server = createServer((req, res) => {
    void (async () => {
      const method = req.url?.match(/^\/twirp\/livekit\.RoomService\/(\w+)$/)?.[1];
      if (req.method !== 'POST' || !method) return twirpError(res, 404, 'bad_route', `no route ${req.method} ${req.url}`);
      requests.push(method);
      const auth = req.headers.authorization;
      try {
        const claims = await verifier.verify(auth?.startsWith('Bearer ') ? auth.slice(7) : '');
        if (!claims.video?.roomCreate) return twirpError(res, 403, 'permission_denied', 'roomCreate grant required');
      } catch {
        return twirpError(res, 401, 'unauthenticated', 'invalid token');
      }
      const input = await body(req);
      if (method === 'CreateRoom') {
        const room = { name: String(input.name), emptyTimeout: Number(input.emptyTimeout ?? 0), maxParticipants: Number(input.maxParticipants ?? 0) };
        rooms.set(room.name, room);
        res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ sid: `RM_${room.name.slice(-8)}`, ...room, creationTime: String(Math.floor(Date.now() / 1000)) }));
        return;
      }
      if (method === 'DeleteRoom') {
        if (!rooms.delete(String(input.room))) return twirpError(res, 404, 'not_found', 'room not found');
        res.writeHead(200, { 'Content-Type': 'application/json' }).end('{}');
        return;
      }
      twirpError(res, 404, 'bad_route', `method ${method} not implemented by the fake`);
    })().catch((error: unknown) => twirpError(res, 500, 'internal', String(error)));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `ws://127.0.0.1:${port}`,
    rooms,
    requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
