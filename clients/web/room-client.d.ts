/**
 * Types of the browser room client (transports/webrtc/room-client.js), bundled unmodified into
 * the widget: the build resolves `svc:room-client` to that script, run with a private `window`
 * so it defines nothing on the host page (server/widget/build.ts).
 */
declare module 'svc:room-client' {
  export interface RoomError extends Error {
    readonly code: string;
    readonly fatal: boolean;
  }
  export interface JoinOptions {
    readonly url: string;
    readonly token: string;
    readonly room?: string;
    readonly iceServers?: RTCIceServer[];
    readonly iceTransportPolicy?: RTCIceTransportPolicy;
    /** Ask the server for an ICE restart when the connection drops after it had connected (default true). */
    readonly iceRestart?: boolean;
    readonly iceRestartIntervalMs?: number;
    readonly microphone?: MediaStreamTrack;
    readonly toolCallEvents?: boolean;
    /** Aborted before the room is joined: the join gives up (rejects with code `aborted`) and closes its socket. */
    readonly signal?: AbortSignal;
  }
  export interface RoomEvents {
    track: { track: MediaStreamTrack; stream: MediaStream };
    trackended: { track: MediaStreamTrack };
    connected: Record<string, never>;
    connectionstatechange: { state: RTCPeerConnectionState };
    unpublished: unknown;
    closed: { reason: string };
    disconnected: { code: number; reason: string };
    error: RoomError;
    message: Record<string, unknown>;
    joined: unknown;
    rejoined: unknown;
    iceerror: IceError;
  }
  export interface IceError {
    readonly url: string;
    readonly errorCode: number;
    readonly errorText: string;
  }
  export interface RoomConnection {
    participantId: string | null;
    room: string | null;
    readonly stream: MediaStream;
    readonly peerConnection: RTCPeerConnection | null;
    readonly iceRestarts: number;
    readonly rejoins: number;
    readonly iceErrors: readonly IceError[];
    on<K extends keyof RoomEvents>(event: K, fn: (detail: RoomEvents[K]) => void): RoomConnection;
    off<K extends keyof RoomEvents>(event: K, fn: (detail: RoomEvents[K]) => void): RoomConnection;
    /** A raw signalling message. */
    send(message: unknown): void;
    /** A client -> bot message (`client_message`); present once the room client has it. */
    sendMessage?: (message: Record<string, unknown>) => unknown;
    leave(): void;
  }
  const SvcRoom: { join(options: JoinOptions): Promise<RoomConnection> };
  export default SvcRoom;
}
