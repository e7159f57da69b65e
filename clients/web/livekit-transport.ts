/**
 * A LiveKit room behind the call's room interface (transport.ts), with LiveKit's own browser SDK
 * (`livekit-client`). Not part of the widget bundle: the server builds this file with the SDK
 * into the ES module /widget/<version>/livekit-client.js, which the widget imports only when a
 * Session's room_url is a LiveKit server (livekit-loader.ts). docs/widget.md, "LiveKit rooms".
 *
 * - Join: `Room.connect(url, token)`; the join resolves at `SignalConnected` (the JoinResponse:
 *   the `signallingJoined` mark), the media path is `connected` when the SDK's state is
 *   `Connected` (its primary peer connection connected: the `iceConnected` mark).
 * - The visitor's microphone (the track the call opened) is published as the microphone source.
 * - The bot's tracks: every subscribed remote track's MediaStreamTrack goes to the call, which
 *   plays it in the widget's own media elements (the SDK's `attach` is not used).
 * - Session messages: reliable data packets on the `session` topic, one UTF-8 JSON object each,
 *   sent in order (each send waits for the one before); received from the bot's identity only
 *   (`livekitBotIdentity`).
 * - States: `Reconnecting` / `SignalReconnecting` -> `disconnected` (the call's grace; the SDK
 *   tries to resume meanwhile), back to `Connected` -> `connected`. `Disconnected` with a reason
 *   that is the server's decision (room deleted or closed, participant removed, replaced by the
 *   same identity, server shutdown) -> `closed(reason)` then `disconnected`; any other reason
 *   (signal lost, join failure, given up reconnecting) -> `disconnected` alone (transport lost).
 */
import { ConnectionError, ConnectionErrorReason, ConnectionState, DisconnectReason, LogLevel, Room, RoomEvent, setLogLevel, Track } from 'livekit-client';
import { JoinFailure, LIVEKIT_SESSION_TOPIC, type JoinRoom, type RoomTransport } from './transport.ts';
import { errorMessage } from '../../core/error-message.ts';
import { livekitBotIdentity } from '../../protocol/session-messages.ts';

setLogLevel(LogLevel.warn);

/** Disconnect reasons that are the server's decision about the room or this participant. */
const CLOSED_BY_SERVER: ReadonlySet<DisconnectReason> = new Set([
  DisconnectReason.ROOM_DELETED,
  DisconnectReason.ROOM_CLOSED,
  DisconnectReason.PARTICIPANT_REMOVED,
  DisconnectReason.DUPLICATE_IDENTITY,
  DisconnectReason.SERVER_SHUTDOWN,
]);

/** How long leaving waits for messages still being sent (the `hang-up`) before disconnecting. */
const FLUSH_ON_LEAVE_MS = 1_000;

export const joinLiveKitRoom: JoinRoom = ({ url, token, microphone, handlers, signal }) =>
  new Promise<RoomTransport>((resolve, reject) => {
    const room = new Room({ adaptiveStream: false, dynacast: false, disconnectOnPageLeave: false });
    const encoder = new TextEncoder();
    const decoder = new TextDecoder();
    let joined = false;
    let left = false;
    // Events are delivered once the call holds the transport (after `join` resolved).
    let live = false;
    const held: Array<() => void> = [];
    const emit = (event: () => void) => {
      if (left) return;
      if (live) event();
      else held.push(event);
    };
    let sending: Promise<unknown> = Promise.resolve();

    const transport: RoomTransport = {
      send(message) {
        if (left || !joined) return false;
        let bytes: Uint8Array<ArrayBuffer>;
        try {
          bytes = encoder.encode(JSON.stringify(message));
        } catch {
          return false;
        }
        sending = sending.then(() => room.localParticipant.publishData(bytes, { reliable: true, topic: LIVEKIT_SESSION_TOPIC })).catch(() => undefined);
        return true;
      },
      leave() {
        if (left) return;
        left = true;
        held.length = 0;
        const flushed = new Promise((done) => setTimeout(done, FLUSH_ON_LEAVE_MS));
        void Promise.race([sending, flushed]).then(() => room.disconnect());
      },
    };

    signal?.addEventListener('abort', () => transport.leave(), { once: true });

    room
      .on(RoomEvent.SignalConnected, () => {
        if (joined) return;
        joined = true;
        if (microphone) {
          room.localParticipant.publishTrack(microphone, { source: Track.Source.Microphone, name: 'microphone' }).catch(() => emit(() => handlers.peerState('failed')));
        }
        resolve(transport);
        setTimeout(() => {
          live = true;
          for (const event of held.splice(0)) event();
        }, 0);
      })
      .on(RoomEvent.TrackSubscribed, (track) => {
        if (track.kind === Track.Kind.Audio || track.kind === Track.Kind.Video) emit(() => handlers.track(track.mediaStreamTrack));
      })
      .on(RoomEvent.DataReceived, (payload, participant, _kind, topic, _encryption, senderIdentity) => {
        // Only the bot speaks for the session: another participant of the room is not listened to.
        // The sender as the server stamped it: the bot's last messages (session-ended before it
        // leaves) may arrive after its departure removed it from the room's participants.
        if (topic !== LIVEKIT_SESSION_TOPIC || (senderIdentity ?? participant?.identity) !== livekitBotIdentity(room.name)) return;
        let message: unknown;
        try {
          message = JSON.parse(decoder.decode(payload));
        } catch {
          return;
        }
        if (message && typeof message === 'object' && !Array.isArray(message)) emit(() => handlers.message(message as Record<string, unknown>));
      })
      .on(RoomEvent.ConnectionStateChanged, (state) => {
        if (state === ConnectionState.Connected) emit(() => handlers.peerState('connected'));
        else if (state === ConnectionState.Reconnecting || state === ConnectionState.SignalReconnecting) emit(() => handlers.peerState('disconnected'));
      })
      .on(RoomEvent.Disconnected, (reason) => {
        if (reason !== undefined && CLOSED_BY_SERVER.has(reason)) {
          const name = DisconnectReason[reason] ?? 'closed';
          emit(() => handlers.closed(name.toLowerCase()));
        }
        emit(() => handlers.disconnected());
      });

    room.connect(url, token, { autoSubscribe: true }).catch((err: unknown) => {
      if (!joined) {
        const reason = err instanceof ConnectionError ? err.reason : null;
        const refused = reason === ConnectionErrorReason.NotAllowed || reason === ConnectionErrorReason.LeaveRequest || reason === ConnectionErrorReason.InternalError || reason === ConnectionErrorReason.ServiceNotFound;
        reject(new JoinFailure(refused ? 'refused' : 'network', errorMessage(err)));
        void room.disconnect();
      } else emit(() => handlers.peerState('failed')); // signalling joined, the peer connection never connected
    });
  });
