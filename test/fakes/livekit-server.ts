/**
 * Local stand-in for a LiveKit server's signalling endpoint, speaking LiveKit's real wire
 * protocol well enough for the real `@livekit/rtc-node` SDK (the Rust SDK behind it) to join a
 * room and publish: a WebSocket at `/rtc` carrying protobuf `SignalRequest` / `SignalResponse`
 * (`@livekit/protocol`), the access token as `Authorization: Bearer` (what rtc-node sends) or the
 * `access_token` query parameter (browsers), verified as an HS256 JWT with the API secret by
 * livekit-server-sdk's TokenVerifier. A bad token, a token without `roomJoin` or without a room is
 * refused with HTTP 401 on the upgrade, as LiveKit does; `GET /rtc/validate` answers the same
 * check over plain HTTP (the SDK calls it to explain a refused upgrade).
 *
 * Signalling version: rtc-node 1.1 first tries `/rtc/v1` (single peer connection, the join request
 * with the publisher offer in the URL); this fake answers 404 there, as a LiveKit server without
 * v1 signalling does, and the SDK falls back to `/rtc` (protocol v0, publisher and subscriber
 * peer connections; observed: it sends no further request to /rtc/v1). Of those only the publisher peer
 * connection is modelled: the JoinResponse says `subscriber_primary: false` (the server never
 * offers a subscriber connection; nobody here subscribes), no ICE servers (host candidates only),
 * ping every 5 s with a 15 s timeout.
 *
 * Handled requests: `offer` (the publisher PeerConnection; the server side is libwebrtc through
 * @roamhq/wrtc, which answers), `trickle` both ways, `add_track` -> `track_published` (refused
 * with a NOT_ALLOWED `request_response` when the grant forbids it), `mute`, `ping`/`ping_req` ->
 * `pong`/`pong_resp`, `leave`; `deleteRoom` sends the server's `leave`, and so does a second join
 * with the same identity (DUPLICATE_IDENTITY) to the earlier connection. Everything else is recorded and ignored. Received media is read
 * back with wrtc's nonstandard RTCVideoSink (decoded I420 frames, with their size) and
 * RTCAudioSink (PCM); a received track is matched to its published track by the track id in its
 * msid, which is the `cid` of the AddTrackRequest.
 *
 * Not modelled: the subscriber connection and forwarding media to other participants, data
 * packets, reconnection/resume, simulcast layers, region/URL failover, room API (see
 * test/webrtc/fake-livekit-api.ts), webhooks.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { WebSocketServer, type WebSocket } from 'ws';
import { TokenVerifier, type ClaimGrants } from 'livekit-server-sdk';
import {
  DisconnectReason,
  JoinResponse,
  LeaveRequest,
  LeaveRequest_Action,
  ParticipantInfo,
  ParticipantInfo_State,
  ParticipantPermission,
  Pong,
  RequestResponse,
  RequestResponse_Reason,
  Room,
  ServerInfo,
  ServerInfo_Edition,
  SessionDescription,
  SignalRequest,
  SignalResponse,
  SignalTarget,
  TrackInfo,
  TrackPublishedResponse,
  TrackSource,
  TrackType,
  TrickleRequest,
  type AddTrackRequest,
} from '@livekit/protocol';
import { wrtcWithSources } from '../../transports/webrtc/wrtc.ts';

export const LIVEKIT_SERVER_FAKE_DEFAULTS = {
  apiKey: 'lk-fake-api-key',
  apiSecret: 'lk-fake-api-secret-that-is-long-enough-for-hs256',
  /** Reported in JoinResponse.server_info; the SDK only reads it. */
  serverVersion: '1.8.0-fake',
  /** Seconds, as LiveKit sends them. */
  pingIntervalS: 5,
  pingTimeoutS: 15,
  /** A 10 ms audio chunk whose peak reaches this (of 32767) counts as sound. */
  audibleLevel: 500,
} as const;

export interface LiveKitServerFakeOptions {
  readonly apiKey?: string;
  readonly apiSecret?: string;
  readonly audibleLevel?: number;
}

/** A track the participant announced with AddTrackRequest, and what arrived on it. */
export interface FakePublishedTrack {
  readonly sid: string;
  readonly cid: string;
  readonly name: string;
  readonly type: 'audio' | 'video' | 'data';
  readonly source: TrackSource;
  readonly width: number;
  readonly height: number;
  muted: boolean;
  /** Whether media for it arrived on the publisher PeerConnection. */
  received: boolean;
}

export interface FakeReceivedMedia {
  /** Decoded frames handed over by libwebrtc, and the size of the last one. */
  videoFrames: number;
  videoWidth: number;
  videoHeight: number;
  /** Audio as the receiver decoded it (mono or stereo, usually 48 kHz). */
  audioChunks: number;
  audioSamples: number;
  audioSampleRate: number;
  /** 10 ms chunks whose peak reached `audibleLevel`, and the loudest sample seen. */
  audibleChunks: number;
  audioPeak: number;
}

export interface FakeParticipant {
  readonly sid: string;
  readonly identity: string;
  readonly room: string;
  readonly grant: ClaimGrants;
  /** Query parameters of the signalling connection (sdk, protocol, auto_subscribe, ...). */
  readonly query: Readonly<Record<string, string>>;
  readonly tracks: FakePublishedTrack[];
  readonly media: FakeReceivedMedia;
  /** Every SignalRequest case received, in order (`offer`, `trickle`, `addTrack`, ...). */
  readonly requests: string[];
  /** Requests the fake refused (no permission), with the reason. */
  readonly refusals: string[];
  state: 'joined' | 'active' | 'disconnected';
  /**
   * `leave` (the client sent a LeaveRequest), `socket_closed`, `room_deleted`, `replaced` (the
   * same identity joined again) or `server_closed`.
   */
  leftBy?: 'leave' | 'socket_closed' | 'room_deleted' | 'replaced' | 'server_closed';
  /** libwebrtc's connection state of the publisher PeerConnection. */
  publisherState: string;
}

export interface LiveKitServerFake {
  /** `ws://127.0.0.1:<port>`, what `Room.connect` takes. */
  readonly url: string;
  readonly apiKey: string;
  readonly apiSecret: string;
  /** Every participant that ever joined, in join order (left ones stay, `state: 'disconnected'`). */
  readonly participants: FakeParticipant[];
  /** Upgrades refused: status and reason, in order. */
  readonly refusedUpgrades: Array<{ readonly path: string; readonly status: number; readonly reason: string }>;
  /** Answers of `GET /rtc/validate` (status codes), in order. */
  readonly validations: number[];
  /** Participants currently in `room`. */
  inRoom(room: string): FakeParticipant[];
  /**
   * What LiveKit does on `DeleteRoom`: every participant of the room gets a LeaveRequest
   * (reason ROOM_DELETED, action DISCONNECT, no reconnect) and its connection closes. Returns how
   * many were removed.
   */
  deleteRoom(room: string): number;
  /** libwebrtc's inbound-rtp figures of a participant's publisher connection (diagnostics). */
  inboundStats(participantSid: string): Promise<Array<Record<string, unknown>>>;
  close(): Promise<void>;
}

const enc = (response: SignalResponse['message']): Uint8Array => new SignalResponse({ message: response }).toBinary();
const sid = (prefix: string): string => `${prefix}_${randomBytes(9).toString('base64url')}`;
const SOURCES: Record<string, TrackSource> = { camera: TrackSource.CAMERA, microphone: TrackSource.MICROPHONE, screen_share: TrackSource.SCREEN_SHARE, screen_share_audio: TrackSource.SCREEN_SHARE_AUDIO };

/** LiveKit's defaults: publish, subscribe and data are allowed unless the grant says false. */
function permissionOf(grant: ClaimGrants): ParticipantPermission {
  const video = grant.video ?? {};
  const sources = (video.canPublishSources ?? []) as unknown[];
  return new ParticipantPermission({
    canPublish: video.canPublish ?? true,
    canSubscribe: video.canSubscribe ?? true,
    canPublishData: video.canPublishData ?? true,
    canPublishSources: sources.map((s) => (typeof s === 'number' ? (s as TrackSource) : SOURCES[String(s).toLowerCase()] ?? TrackSource.UNKNOWN)),
    hidden: video.hidden ?? false,
  });
}

interface Connection {
  readonly participant: FakeParticipant;
  readonly permission: ParticipantPermission;
  readonly ws: WebSocket;
  pc?: RTCPeerConnection;
  remoteSet: boolean;
  readonly pendingCandidates: RTCIceCandidateInit[];
  readonly sinks: Array<{ stop(): void }>;
  closed: boolean;
}

export async function startLiveKitServerFake(options: LiveKitServerFakeOptions = {}): Promise<LiveKitServerFake> {
  const apiKey = options.apiKey ?? LIVEKIT_SERVER_FAKE_DEFAULTS.apiKey;
  const apiSecret = options.apiSecret ?? LIVEKIT_SERVER_FAKE_DEFAULTS.apiSecret;
  const audibleLevel = options.audibleLevel ?? LIVEKIT_SERVER_FAKE_DEFAULTS.audibleLevel;
  const verifier = new TokenVerifier(apiKey, apiSecret);
  const participants: FakeParticipant[] = [];
  const refusedUpgrades: Array<{ path: string; status: number; reason: string }> = [];
  const validations: number[] = [];
  const connections = new Set<Connection>();
  const rooms = new Map<string, { sid: string; createdAt: bigint }>();

  /** The token check of both the upgrade and /rtc/validate: the grant, or why it is refused. */
  async function authenticate(req: IncomingMessage, url: URL): Promise<{ grant: ClaimGrants } | { status: number; reason: string }> {
    const header = req.headers.authorization;
    const token = header?.startsWith('Bearer ') ? header.slice(7) : url.searchParams.get('access_token');
    if (!token) return { status: 401, reason: 'no authorization token' };
    let grant: ClaimGrants;
    try {
      grant = await verifier.verify(token);
    } catch (error) {
      return { status: 401, reason: `invalid token: ${error instanceof Error ? error.message : String(error)}` };
    }
    if (!grant.video?.roomJoin || !grant.video.room) return { status: 401, reason: 'permissions denied: roomJoin grant with a room required' };
    if (!grant.sub) return { status: 401, reason: 'permissions denied: identity required' };
    return { grant };
  }

  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (req.method !== 'GET' || url.pathname !== '/rtc/validate') return void res.writeHead(404).end('404 page not found\n');
    void authenticate(req, url).then((auth) => {
      const status = 'status' in auth ? auth.status : 200;
      validations.push(status);
      res.writeHead(status, { 'Content-Type': 'text/plain' }).end('status' in auth ? auth.reason : 'success');
    });
  });
  const wss = new WebSocketServer({ noServer: true, maxPayload: 1 << 20 });

  function refuse(socket: Socket, path: string, status: number, reason: string): void {
    refusedUpgrades.push({ path, status, reason });
    const text = status === 404 ? 'Not Found' : 'Unauthorized';
    socket.end(`HTTP/1.1 ${status} ${text}\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(reason)}\r\nConnection: close\r\n\r\n${reason}`);
  }

  server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    socket.on('error', () => undefined); // a client that hangs up during the token check
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (url.pathname !== '/rtc') return refuse(socket, url.pathname, 404, '404 page not found\n');
    void authenticate(req, url).then((auth) => {
      if ('status' in auth) return refuse(socket, url.pathname, auth.status, auth.reason);
      wss.handleUpgrade(req, socket, head, (ws) => join(ws, auth.grant, Object.fromEntries(url.searchParams)));
    });
  });

  function send(conn: Connection, message: SignalResponse['message']): void {
    if (!conn.closed && conn.ws.readyState === conn.ws.OPEN) conn.ws.send(enc(message));
  }

  function join(ws: WebSocket, grant: ClaimGrants, query: Record<string, string>): void {
    const roomName = grant.video!.room!;
    let room = rooms.get(roomName);
    if (!room) rooms.set(roomName, (room = { sid: sid('RM'), createdAt: BigInt(Math.floor(Date.now() / 1000)) }));
    // LiveKit admits the newcomer and removes an earlier participant with the same identity.
    for (const old of [...connections].filter((c) => c.participant.room === roomName && c.participant.identity === grant.sub)) {
      send(old, { case: 'leave', value: new LeaveRequest({ canReconnect: false, reason: DisconnectReason.DUPLICATE_IDENTITY, action: LeaveRequest_Action.DISCONNECT }) });
      disconnect(old, 'replaced');
      old.ws.close(1000);
    }
    const others = participants.filter((p) => p.room === roomName && p.state !== 'disconnected');
    const participant: FakeParticipant = {
      sid: sid('PA'),
      identity: grant.sub!,
      room: roomName,
      grant,
      query: Object.fromEntries(Object.entries(query).filter(([k]) => k !== 'access_token')),
      tracks: [],
      media: { videoFrames: 0, videoWidth: 0, videoHeight: 0, audioChunks: 0, audioSamples: 0, audioSampleRate: 0, audibleChunks: 0, audioPeak: 0 },
      requests: [],
      refusals: [],
      state: 'joined',
      publisherState: 'new',
    };
    participants.push(participant);
    const conn: Connection = { participant, permission: permissionOf(grant), ws, remoteSet: false, pendingCandidates: [], sinks: [], closed: false };
    connections.add(conn);
    send(conn, {
      case: 'join',
      value: new JoinResponse({
        room: new Room({ sid: room.sid, name: roomName, creationTime: room.createdAt, numParticipants: others.length + 1, emptyTimeout: 300, departureTimeout: 20 }),
        participant: info(conn),
        otherParticipants: others.map((p) => new ParticipantInfo({ sid: p.sid, identity: p.identity, state: ParticipantInfo_State.ACTIVE })),
        serverVersion: LIVEKIT_SERVER_FAKE_DEFAULTS.serverVersion,
        serverInfo: new ServerInfo({ edition: ServerInfo_Edition.Standard, version: LIVEKIT_SERVER_FAKE_DEFAULTS.serverVersion, protocol: 16, nodeId: 'ND_fake' }),
        iceServers: [],
        subscriberPrimary: false,
        pingInterval: LIVEKIT_SERVER_FAKE_DEFAULTS.pingIntervalS,
        pingTimeout: LIVEKIT_SERVER_FAKE_DEFAULTS.pingTimeoutS,
      }),
    });
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      if (!isBinary) return void participant.requests.push('<text>');
      let request: SignalRequest;
      try {
        request = SignalRequest.fromBinary(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
      } catch {
        return void participant.requests.push('<undecodable>');
      }
      void handle(conn, request).catch((error: unknown) => participant.refusals.push(`internal: ${error instanceof Error ? error.message : String(error)}`));
    });
    ws.on('close', () => disconnect(conn, 'socket_closed'));
    ws.on('error', () => disconnect(conn, 'socket_closed'));
  }

  function info(conn: Connection): ParticipantInfo {
    const p = conn.participant;
    return new ParticipantInfo({
      sid: p.sid,
      identity: p.identity,
      name: p.grant.name ?? '',
      metadata: p.grant.metadata ?? '',
      state: p.state === 'active' ? ParticipantInfo_State.ACTIVE : ParticipantInfo_State.JOINED,
      permission: conn.permission,
      isPublisher: p.tracks.length > 0,
      tracks: p.tracks.map(trackInfo),
    });
  }

  function trackInfo(t: FakePublishedTrack): TrackInfo {
    return new TrackInfo({
      sid: t.sid,
      name: t.name,
      type: t.type === 'audio' ? TrackType.AUDIO : t.type === 'video' ? TrackType.VIDEO : TrackType.DATA,
      source: t.source,
      width: t.width,
      height: t.height,
      muted: t.muted,
    });
  }

  async function handle(conn: Connection, request: SignalRequest): Promise<void> {
    const p = conn.participant;
    const m = request.message;
    p.requests.push(m.case ?? '<empty>');
    switch (m.case) {
      case 'offer':
        return answer(conn, m.value);
      case 'trickle':
        return trickle(conn, m.value);
      case 'addTrack':
        return addTrack(conn, m.value);
      case 'mute': {
        const track = p.tracks.find((t) => t.sid === m.value.sid);
        if (track) track.muted = m.value.muted;
        return;
      }
      case 'ping':
        return send(conn, { case: 'pong', value: BigInt(Date.now()) });
      case 'pingReq':
        return send(conn, { case: 'pongResp', value: new Pong({ lastPingTimestamp: m.value.timestamp, timestamp: BigInt(Date.now()) }) });
      case 'leave':
        disconnect(conn, 'leave');
        conn.ws.close(1000);
        return;
      default:
        return; // recorded above; subscriptions, track settings, metadata... are not modelled
    }
  }

  function addTrack(conn: Connection, req: AddTrackRequest): void {
    const p = conn.participant;
    const refuse = (why: string) => {
      p.refusals.push(`addTrack ${req.name}: ${why}`);
      send(conn, { case: 'requestResponse', value: new RequestResponse({ reason: RequestResponse_Reason.NOT_ALLOWED, message: why }) });
    };
    if (!conn.permission.canPublish) return refuse('no canPublish grant');
    const allowed = conn.permission.canPublishSources;
    if (allowed.length > 0 && !allowed.includes(req.source)) return refuse(`source ${TrackSource[req.source]} not in canPublishSources`);
    if (p.tracks.some((t) => t.cid === req.cid)) return refuse(`cid ${req.cid} already published`);
    const track: FakePublishedTrack = {
      sid: sid('TR'),
      cid: req.cid,
      name: req.name,
      type: req.type === TrackType.AUDIO ? 'audio' : req.type === TrackType.VIDEO ? 'video' : 'data',
      source: req.source,
      width: req.width,
      height: req.height,
      muted: req.muted,
      received: false,
    };
    p.tracks.push(track);
    send(conn, { case: 'trackPublished', value: new TrackPublishedResponse({ cid: req.cid, track: trackInfo(track) }) });
  }

  function publisherPc(conn: Connection): RTCPeerConnection {
    if (conn.pc) return conn.pc;
    const wrtc = wrtcWithSources();
    const pc = new wrtc.RTCPeerConnection({ iceServers: [] });
    conn.pc = pc;
    pc.onicecandidate = (event) => {
      const c = event.candidate;
      if (!c) return; // LiveKit does not send an end-of-candidates trickle
      const init = JSON.stringify({ candidate: c.candidate, sdpMid: c.sdpMid, sdpMLineIndex: c.sdpMLineIndex, usernameFragment: c.usernameFragment ?? undefined });
      send(conn, { case: 'trickle', value: new TrickleRequest({ candidateInit: init, target: SignalTarget.PUBLISHER }) });
    };
    pc.onconnectionstatechange = () => {
      conn.participant.publisherState = pc.connectionState;
      if (pc.connectionState === 'connected' && conn.participant.state === 'joined') conn.participant.state = 'active';
    };
    pc.ontrack = (event) => receive(conn, event.track);
    return pc;
  }

  function receive(conn: Connection, track: MediaStreamTrack): void {
    if (conn.closed) return;
    const p = conn.participant;
    const published = p.tracks.find((t) => t.cid === track.id);
    if (published) published.received = true;
    else p.refusals.push(`media for unannounced track ${track.id}`);
    const { nonstandard } = wrtcWithSources();
    if (track.kind === 'video') {
      const sink = new nonstandard.RTCVideoSink(track);
      sink.onframe = ({ frame }: { frame: { width: number; height: number } }) => {
        p.media.videoFrames += 1;
        p.media.videoWidth = frame.width;
        p.media.videoHeight = frame.height;
      };
      conn.sinks.push(sink);
    } else {
      const sink = new nonstandard.RTCAudioSink(track);
      sink.ondata = (data: { samples: Int16Array; sampleRate: number }) => {
        let peak = 0;
        for (const s of data.samples) peak = Math.max(peak, Math.abs(s));
        p.media.audioChunks += 1;
        p.media.audioSamples += data.samples.length;
        p.media.audioSampleRate = data.sampleRate;
        p.media.audioPeak = Math.max(p.media.audioPeak, peak);
        if (peak >= audibleLevel) p.media.audibleChunks += 1;
      };
      conn.sinks.push(sink);
    }
  }

  async function answer(conn: Connection, offer: SessionDescription): Promise<void> {
    const pc = publisherPc(conn);
    await pc.setRemoteDescription({ type: 'offer', sdp: offer.sdp });
    conn.remoteSet = true;
    for (const c of conn.pendingCandidates.splice(0)) await pc.addIceCandidate(c).catch(() => undefined);
    const local = await pc.createAnswer();
    await pc.setLocalDescription(local);
    send(conn, { case: 'answer', value: new SessionDescription({ type: 'answer', sdp: pc.localDescription?.sdp ?? local.sdp ?? '', id: offer.id }) });
  }

  async function trickle(conn: Connection, req: TrickleRequest): Promise<void> {
    if (req.target !== SignalTarget.PUBLISHER) return; // no subscriber connection here
    const init = JSON.parse(req.candidateInit) as RTCIceCandidateInit;
    if (!init.candidate) return;
    if (!conn.remoteSet) return void conn.pendingCandidates.push(init);
    await publisherPc(conn).addIceCandidate(init).catch(() => undefined);
  }

  function disconnect(conn: Connection, by: NonNullable<FakeParticipant['leftBy']>): void {
    if (conn.closed) return;
    conn.closed = true;
    connections.delete(conn);
    conn.participant.state = 'disconnected';
    conn.participant.leftBy = by;
    for (const sink of conn.sinks.splice(0)) sink.stop();
    if (conn.pc) {
      conn.pc.onicecandidate = null;
      conn.pc.ontrack = null;
      conn.pc.onconnectionstatechange = null;
      conn.pc.close();
      conn.participant.publisherState = 'closed';
    }
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `ws://127.0.0.1:${port}`,
    apiKey,
    apiSecret,
    participants,
    refusedUpgrades,
    validations,
    inRoom: (room) => participants.filter((p) => p.room === room && p.state !== 'disconnected'),
    async inboundStats(participantSid) {
      const conn = [...connections].find((c) => c.participant.sid === participantSid);
      if (!conn?.pc) return [];
      const rows: Array<Record<string, unknown>> = [];
      (await conn.pc.getStats()).forEach((s: Record<string, unknown>) => {
        if (s.type === 'inbound-rtp') rows.push({ kind: s.kind ?? s.mediaType, packetsReceived: s.packetsReceived, packetsLost: s.packetsLost, framesReceived: s.framesReceived, framesDecoded: s.framesDecoded, keyFramesDecoded: s.keyFramesDecoded, pliCount: s.pliCount, firCount: s.firCount, nackCount: s.nackCount });
      });
      return rows;
    },
    deleteRoom(room) {
      const removed = [...connections].filter((conn) => conn.participant.room === room);
      for (const conn of removed) {
        send(conn, { case: 'leave', value: new LeaveRequest({ canReconnect: false, reason: DisconnectReason.ROOM_DELETED, action: LeaveRequest_Action.DISCONNECT }) });
        disconnect(conn, 'room_deleted');
        conn.ws.close(1000);
      }
      rooms.delete(room);
      return removed.length;
    },
    async close() {
      for (const conn of [...connections]) {
        disconnect(conn, 'server_closed');
        conn.ws.terminate();
      }
      wss.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
