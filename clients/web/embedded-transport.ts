/**
 * The embedded room (transports/webrtc/room-client.js, bundled as `svc:room-client`) behind the
 * call's room interface (transport.ts): signalling WebSocket, one peer connection, session
 * messages as `client_message` / `app_message` on the socket.
 */
import SvcRoom from 'svc:room-client';
import { JoinFailure, type JoinRoom, type RoomTransport } from './transport.ts';

export const joinEmbeddedRoom: JoinRoom = async ({ url, token, microphone, handlers, signal }) => {
  let room: Awaited<ReturnType<typeof SvcRoom.join>>;
  try {
    room = await SvcRoom.join({ url, token, toolCallEvents: false, ...(microphone ? { microphone } : {}), ...(signal ? { signal } : {}) });
  } catch (err) {
    const code = (err as { code?: string })?.code ?? '';
    throw new JoinFailure(code === 'connection_closed' ? 'network' : 'refused', String((err as Error)?.message ?? err));
  }
  let left = false;
  let serverUnavailable = false;
  room.on('error', (error) => {
    if (left) return;
    if (error.code === 'ice_unavailable') {
      // The server could not offer a media path at all (no free port, no relay): no use waiting.
      serverUnavailable = true;
      handlers.peerState('failed');
    } else if (error.code === 'internal_error' && !error.fatal) {
      // The server could not make this visitor's peer connection (or its offer): no media will
      // come, and it is not the visitor's network.
      handlers.serverFailed(error.message);
    }
  });
  room.on('track', ({ track }) => !left && handlers.track(track));
  room.on('connectionstatechange', ({ state }) => {
    if (!left && (state === 'connected' || state === 'disconnected' || state === 'failed')) handlers.peerState(state);
  });
  room.on('message', (message) => !left && handlers.message(message));
  room.on('closed', ({ reason }) => !left && handlers.closed(reason));
  room.on('disconnected', () => !left && handlers.disconnected());
  const transport: RoomTransport = {
    send(message) {
      if (left) return false;
      try {
        if (typeof room.sendMessage === 'function') room.sendMessage(message);
        else room.send({ type: 'client_message', message });
        return true;
      } catch {
        return false;
      }
    },
    leave() {
      if (left) return;
      left = true;
      room.leave();
    },
    iceFault() {
      if (serverUnavailable) return 'ojin';
      // 401: the TURN server refused the credential the service minted (its secret does not match).
      return (room.iceErrors ?? []).some((e) => /^turns?:/i.test(e.url ?? '') && e.errorCode === 401) ? 'ojin' : null;
    },
  };
  return transport;
};
