/**
 * Which room the widget releases (`POST /v1/public/agents/connect/{room}`): the spec takes the
 * room name from the Session's room_url. An embedded room's URL and (since 2026-11-29) a LiveKit
 * room's carry it as their `room` parameter; a LiveKit room_url from an older server does not, and
 * the widget then reads the join token's `video.room` grant.
 */
import test from 'ava';
import { AccessToken } from 'livekit-server-sdk';
import { roomKind, roomNameOf } from '../../clients/web/transport.ts';
import { roomUrlOf } from '../../transports/livekit/livekit-room-provider.ts';

async function livekitToken(room: string): Promise<string> {
  const at = new AccessToken('key', 'secret-secret-secret-secret-secret', { identity: 'user-1' });
  at.addGrant({ roomJoin: true, room });
  return at.toJwt();
}

test('an embedded room_url names its room', (t) => {
  const url = 'https://svc.example.com/v1/rooms/signal?room=s_abc';
  t.is(roomKind(url), 'embedded');
  t.is(roomNameOf({ room_url: url, token: 'opaque' }), 's_abc');
});

test("a LiveKit room_url from this server names its room; the SDK's URL keeps the server's address", async (t) => {
  for (const server of ['wss://lk.example.com', 'wss://lk.example.com/', 'wss://lk.example.com/base', 'ws://127.0.0.1:7880']) {
    const url = roomUrlOf(server, 's_room-1');
    t.is(roomKind(url), 'livekit', url);
    // The token names another room: the URL is what the spec says to read.
    t.is(roomNameOf({ room_url: url, token: await livekitToken('s_other') }), 's_room-1', url);
    const parsed = new URL(url);
    t.is(`${parsed.protocol}//${parsed.host}${parsed.pathname.replace(/\/$/, '')}`, server.replace(/\/$/, ''), url);
  }
});

test('a LiveKit room_url without a room parameter (an older server): the token grant names it; nothing to read: null', async (t) => {
  t.is(roomNameOf({ room_url: 'wss://lk.example.com', token: await livekitToken('s_from-token') }), 's_from-token');
  t.is(roomNameOf({ room_url: 'wss://lk.example.com', token: 'not-a-jwt' }), null);
  t.is(roomNameOf({ room_url: 'not a url', token: await livekitToken('s_x') }), null);
});
