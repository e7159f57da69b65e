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
 * Browsers (the widget's `livekit-client`, test/widget/widget-livekit.test.ts) needed two more
 * things of LiveKit's, added for them:
 * - CORS on every HTTP answer, 404s included: `Access-Control-Allow-Origin` echoing the request's
 *   Origin (`Vary: Origin`) and preflights answered 204, as LiveKit's outermost middleware
 *   (rs/cors, any origin, any header) does. Without it a page of another origin cannot read
 *   `/rtc/v1/validate`'s 404, so livekit-client takes the refused v1 upgrade for an unreachable
 *   server instead of falling back to `/rtc`, and the join fails (observed).
 * - Resume: a signalling connection with `reconnect=1&sid=...` (the SDK lost its socket and tries
 *   to keep its session) is answered as LiveKit answers one for a participant it no longer has
 *   (this fake forgets a participant when its socket closes): a LeaveRequest (STATE_MISMATCH,
 *   action RECONNECT, can_reconnect) on the opened socket, then close; the SDK then rejoins in
 *   full (a new join, its tracks published again). Earlier it was taken for a new join.
 * And two faults a test can cause (no LiveKit API): `dropSignal(identity)` drops the signalling
 * socket without a close handshake (a blip the SDK recovers from by rejoining), `cutOff(identity)`
 * drops it, closes the peer connections, and drops every later connection with that identity's
 * token before an answer, as an unreachable server would be, until `restore(identity)`.
 *
 * Signalling version: rtc-node 1.1 first tries `/rtc/v1` (single peer connection, the join request
 * with the publisher offer in the URL); this fake answers 404 there, as a LiveKit server without
 * v1 signalling does, and the SDK falls back to `/rtc` (protocol v0, publisher and subscriber
 * peer connections; observed: it sends no further request to /rtc/v1). No ICE servers (host
 * candidates only), ping every 5 s with a 15 s timeout.
 *
 * A small SFU, for rooms where participants hear and see each other (sessions in LiveKit rooms):
 * - Publisher PeerConnection (client offers; the server side is libwebrtc through @roamhq/wrtc,
 *   which answers). Received media is read back with wrtc's nonstandard RTCVideoSink (decoded
 *   I420 frames, with their size) and RTCAudioSink (PCM); a received track is matched to its
 *   published track by the track id in its msid, which is the `cid` of the AddTrackRequest.
 * - Subscriber PeerConnection, for participants whose grant allows subscribing (others, such as
 *   a publish-only avatar token, keep `subscriber_primary: false` and get none): the JoinResponse
 *   says `subscriber_primary: true` and the server offers at once, with its `_reliable` and
 *   `_lossy` data channels; it re-offers (one offer at a time) when forwarded tracks come or go.
 * - Forwarding: each received track is added to the subscriber connection of every other
 *   participant of the room (all of them with `auto_subscribe`, the default; else those that
 *   asked with UpdateSubscription) in a stream whose id is `<participant sid>|<track sid>`, the
 *   msid the SDK maps to participant and publication. libwebrtc re-encodes what it forwards
 *   (a real SFU forwards packets): the video sender keeps the resolution and starts at 2 Mbps
 *   (x-google-start-bitrate in the answer) so the picture is not first scaled down by the fake.
 * - Participants: JoinResponse.other_participants (with their tracks), ParticipantUpdate to the
 *   others when one joins, publishes a track or leaves (state DISCONNECTED).
 * - Data: DataPackets received on a participant's publisher data channels (user packets, data
 *   streams: header/chunk/trailer, RPC: request/ack/response, chat, transcriptions) are handled
 *   as LiveKit's participant does (`inspectDataPacket`: the sender stamped, reliable duplicates
 *   dropped by sequence, metrics kept back) and sent on the same kind of subscriber data channel
 *   of every other participant (or of the packet's destination identities), queued until that
 *   channel opens; refused without canPublishData. Participants carry their token's `attributes`
 *   and `kind` and their advertised `client_protocol`, which the SDKs read to route RPC and to
 *   recognise agents and avatars (`lk.publish_on_behalf`).
 * - Room API (Twirp, JSON) on the same port, as LiveKit serves it: CreateRoom and DeleteRoom with
 *   the `roomCreate` grant (what `LiveKitRoomProvider` calls).
 *
 * Handled requests: `offer`, `answer` (of the subscriber offer), `trickle` both ways for both
 * connections, `add_track` -> `track_published` (refused with a NOT_ALLOWED `request_response`
 * when the grant forbids it), `subscription`, `mute`, `ping`/`ping_req` -> `pong`/`pong_resp`,
 * `leave`; `deleteRoom` sends the server's `leave`, and so does a second join with the same
 * identity (DUPLICATE_IDENTITY) to the earlier connection. Everything else is recorded and ignored.
 *
 * Not modelled: resuming a session (see above), ICE restarts, simulcast layers (a simulcast
 * publication is received as libwebrtc's receiver takes it; the session bot and the widget's
 * microphone publish without simulcast), adaptive stream and
 * track settings, speaker detection, room metadata, webhooks, region/URL failover, the data-track
 * channel, server-initiated RPC, the data message cache of migrations, permissions updates after joining.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { WebSocketServer, type WebSocket } from 'ws';
import { TokenVerifier, type ClaimGrants } from 'livekit-server-sdk';
import {
  DataPacket,
  DataPacket_Kind,
  DisconnectReason,
  JoinResponse,
  LeaveRequest,
  LeaveRequest_Action,
  ParticipantInfo,
  ParticipantInfo_Kind,
  ParticipantInfo_State,
  ParticipantPermission,
  ParticipantUpdate,
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
  type UpdateSubscription,
} from '@livekit/protocol';
import { wrtcWithSources } from '../../transports/webrtc/wrtc.ts';

export const LIVEKIT_SERVER_FAKE_DEFAULTS = {
  apiKey: 'lk-fake-api-key',
  apiSecret: 'lk-fake-api-secret-that-is-long-enough-for-hs256',
  /**
   * Reported in JoinResponse.server_info. A plain semver: the Rust SDK under rtc-node parses it
   * and refuses RPC (`UNSUPPORTED_SERVER`) below 1.8.0, which a pre-release tag such as
   * `1.8.0-fake` is.
   */
  serverVersion: '1.9.0',
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
   * same identity joined again), `server_closed` or `cut_off` (`cutOff`, a network cut).
   */
  leftBy?: 'leave' | 'socket_closed' | 'room_deleted' | 'replaced' | 'server_closed' | 'cut_off';
  /** libwebrtc's connection state of the publisher PeerConnection. */
  publisherState: string;
  /** libwebrtc's connection state of the subscriber PeerConnection (`none`: never offered one). */
  subscriberState: string;
  /** Sids of other participants' tracks forwarded to this one (on its subscriber connection). */
  readonly forwarded: string[];
  /** Data packets this participant sent (`user` packets: topic, size, how many it reached). */
  readonly dataSent: FakeDataPacket[];
  /**
   * What the fake could not hand to this participant because its subscriber connection was
   * closing under the call (libwebrtc's state changes on its own threads, so a channel or a
   * connection the fake saw open can refuse the next call): dropped, as a real SFU drops it.
   */
  readonly dropped: string[];
}

export interface FakeDataPacket {
  readonly kind: 'reliable' | 'lossy';
  /** The packet's case: `user`, `streamHeader`, `streamChunk`, `streamTrailer`, `rpcRequest`, `rpcAck`, `rpcResponse`, ... */
  readonly type: string;
  /** The user packet's or the stream header's topic ('' for the others). */
  readonly topic: string;
  /** Payload bytes: a user packet's payload, a stream chunk's content, an RPC's payload (0 for the others). */
  readonly bytes: number;
  /** Participants it was forwarded to (identities). */
  readonly deliveredTo: string[];
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
  /** Room API (Twirp) methods called, in order (`CreateRoom`, `DeleteRoom`). */
  readonly roomApiRequests: string[];
  /** Rooms created through the room API and not deleted, with the settings they were created with. */
  readonly createdRooms: Map<string, { readonly name: string; readonly emptyTimeout: number; readonly maxParticipants: number }>;
  /** Participants currently in `room`. */
  inRoom(room: string): FakeParticipant[];
  /**
   * What LiveKit does on `DeleteRoom`: every participant of the room gets a LeaveRequest
   * (reason ROOM_DELETED, action DISCONNECT, no reconnect) and its connection closes. Returns how
   * many were removed.
   */
  deleteRoom(room: string): number;
  /**
   * A network cut between the participants of `identity` and this server (a test's fault, no
   * LiveKit API): their signalling sockets are dropped without a close handshake, their peer
   * connections closed (the others are told they left), and every later connection carrying a
   * token of that identity (signalling on any path, /rtc/validate) is dropped before an answer, as
   * an unreachable server would be, until `restore(identity)`. Returns how many were cut.
   */
  cutOff(identity: string): number;
  restore(identity: string): void;
  /**
   * Drops the signalling sockets of `identity` without a close handshake (a test's fault, as a
   * network blip would): the fake forgets those participants as for any closed socket, and their
   * SDK's resume gets the LeaveRequest of `resume` (then it joins again). Returns how many.
   */
  dropSignal(identity: string): number;
  /** Signalling connections of a cut-off identity dropped since (what its SDK tried meanwhile). */
  readonly droppedWhileCut: string[];
  /** Identities whose resume (`reconnect=1`) was answered with a LeaveRequest (action RECONNECT). */
  readonly resumesRefused: string[];
  /** libwebrtc's inbound-rtp figures of a participant's publisher connection (diagnostics). */
  inboundStats(participantSid: string): Promise<Array<Record<string, unknown>>>;
  close(): Promise<void>;
}

const enc = (response: SignalResponse['message']): Uint8Array => new SignalResponse({ message: response }).toBinary();
const sid = (prefix: string): string => `${prefix}_${randomBytes(9).toString('base64url')}`;
const SOURCES: Record<string, TrackSource> = { camera: TrackSource.CAMERA, microphone: TrackSource.MICROPHONE, screen_share: TrackSource.SCREEN_SHARE, screen_share_audio: TrackSource.SCREEN_SHARE_AUDIO };

/**
 * The subscriber's answer with a video start bitrate for our sending side (kbps in
 * `x-google-start-bitrate`): libwebrtc re-encodes forwarded video and, starting from its default
 * estimate, would first send a scaled-down picture, where a real SFU forwards the publisher's.
 */
function withStartBitrate(sdp: string, kbps = 2000): string {
  const lines = sdp.split('\r\n');
  const out: string[] = [];
  let video = false;
  const withFmtp = new Set(lines.filter((l) => l.startsWith('a=fmtp:')).map((l) => l.slice(7).split(' ')[0]));
  for (const line of lines) {
    if (line.startsWith('m=')) video = line.startsWith('m=video');
    const fmtp = /^a=fmtp:(\d+) (.*)$/.exec(line);
    const rtpmap = /^a=rtpmap:(\d+) (VP8|VP9|H264|AV1)\//i.exec(line);
    if (video && fmtp && !line.includes('x-google-start-bitrate') && !/apt=/.test(fmtp[2]!)) {
      out.push(`${line};x-google-start-bitrate=${kbps}`);
      continue;
    }
    out.push(line);
    if (video && rtpmap && !withFmtp.has(rtpmap[1]!)) out.push(`a=fmtp:${rtpmap[1]} x-google-start-bitrate=${kbps}`);
  }
  return out.join('\r\n');
}

// ---- Data packets (user packets, data streams, RPC) ----------------------------------------------

/** LiveKit's participant kinds, from the token's `kind` claim. */
function participantKindOf(kind: string | undefined): ParticipantInfo_Kind {
  switch ((kind ?? '').toLowerCase()) {
    case 'ingress':
      return ParticipantInfo_Kind.INGRESS;
    case 'egress':
      return ParticipantInfo_Kind.EGRESS;
    case 'sip':
      return ParticipantInfo_Kind.SIP;
    case 'agent':
      return ParticipantInfo_Kind.AGENT;
    default:
      return ParticipantInfo_Kind.STANDARD;
  }
}

interface InspectedDataPacket {
  readonly forward: boolean;
  readonly refusal?: string;
  readonly type: string;
  readonly topic: string;
  readonly bytes: number;
}

/**
 * What LiveKit's `handleReceivedDataMessage` does with a packet before the room forwards it (read
 * from livekit-server, pkg/rtc/participant.go): the channel it came on is its kind; a user packet
 * gets the sender's sid and identity and its destinations agree with the packet's; data stream
 * headers, chunks and trailers and RPC requests, acks and responses go on as they are (an ack or
 * response to an RPC the server itself made would be consumed: this fake makes none);
 * transcriptions only from agents; metrics are not forwarded to participants (the server
 * aggregates them). Every forwarded packet carries the sender's identity, set by the server
 * whatever the client wrote (a hidden participant's is blank), so a receiver can trust who sent
 * it: agents may keep the identity they publish on behalf of only for chat messages and text
 * streams (`generated` set). Mutates `packet`.
 */
function inspectDataPacket(packet: DataPacket, sender: FakeParticipant, kind: 'reliable' | 'lossy'): InspectedDataPacket {
  packet.kind = kind === 'reliable' ? DataPacket_Kind.RELIABLE : DataPacket_Kind.LOSSY;
  const hidden = sender.grant.video?.hidden === true;
  const isAgent = participantKindOf(sender.grant.kind) === ParticipantInfo_Kind.AGENT;
  const onBehalf = isAgent && packet.participantIdentity !== '' && packet.participantIdentity !== sender.identity;
  let overrideSender = true;
  const value = packet.value;
  const type = value.case ?? '<empty>';
  let topic = '';
  let bytes = 0;
  switch (value.case) {
    case 'user': {
      const user = value.value;
      user.participantSid = hidden ? '' : sender.sid;
      user.participantIdentity = hidden ? '' : sender.identity;
      if (packet.destinationIdentities.length > 0) user.destinationIdentities = [...packet.destinationIdentities];
      else packet.destinationIdentities = [...user.destinationIdentities];
      topic = user.topic ?? '';
      bytes = user.payload.byteLength;
      break;
    }
    case 'streamHeader': {
      topic = value.value.topic;
      const header = value.value.contentHeader;
      if (onBehalf && header.case === 'textHeader') {
        header.value.generated = true;
        overrideSender = false;
      }
      break;
    }
    case 'streamChunk':
      bytes = value.value.content.byteLength;
      break;
    case 'streamTrailer':
    case 'rpcAck':
      break;
    case 'rpcRequest':
      bytes = Buffer.byteLength(value.value.payload);
      break;
    case 'rpcResponse':
      bytes = value.value.value.case === 'payload' ? Buffer.byteLength(value.value.value.value) : 0;
      break;
    case 'chatMessage':
      if (onBehalf) {
        value.value.generated = true;
        overrideSender = false;
      }
      break;
    case 'transcription':
      if (!isAgent) return { forward: false, type, topic, bytes, refusal: 'transcription from a participant that is not an agent: not forwarded' };
      break;
    case 'metrics':
      return { forward: false, type, topic, bytes };
    case 'sipDtmf':
    case 'encryptedPacket':
      break;
    default:
      return { forward: false, type, topic, bytes, refusal: `unsupported data packet ${type}` };
  }
  if (overrideSender) {
    packet.participantIdentity = hidden ? '' : sender.identity;
    packet.participantSid = hidden ? '' : sender.sid;
  }
  return { forward: true, type, topic, bytes };
}

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

interface SubscriberSide {
  readonly pc: RTCPeerConnection;
  /** Server-created data channels (`_reliable`, `_lossy`), what the SDK receives data on. */
  readonly channels: Map<'reliable' | 'lossy', RTCDataChannel>;
  /** Packets waiting for their channel to open. */
  readonly queued: Array<{ kind: 'reliable' | 'lossy'; bytes: Uint8Array }>;
  /** Track sid -> the sender carrying it. */
  readonly senders: Map<string, RTCRtpSender>;
  remoteSet: boolean;
  readonly pendingCandidates: RTCIceCandidateInit[];
  /** An offer is out (waiting for its answer); `again`: something changed meanwhile. */
  offering: boolean;
  again: boolean;
  offerId: number;
}

interface Connection {
  readonly participant: FakeParticipant;
  readonly permission: ParticipantPermission;
  readonly ws: WebSocket;
  pc?: RTCPeerConnection;
  remoteSet: boolean;
  readonly pendingCandidates: RTCIceCandidateInit[];
  readonly sinks: Array<{ stop(): void }>;
  /** The received media of this participant's published tracks, by track sid (what is forwarded). */
  readonly media: Map<string, MediaStreamTrack>;
  /** Subscriber connection: only for participants allowed to subscribe (subscriber_primary). */
  sub?: SubscriberSide;
  /** `auto_subscribe` (default on, as in the SDKs) or the sids asked for with UpdateSubscription. */
  readonly autoSubscribe: boolean;
  readonly wanted: Set<string>;
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
  const cut = new Set<string>();
  const resumesRefused: string[] = [];
  const droppedWhileCut: string[] = [];
  const connections = new Set<Connection>();
  /** Data packets: the last reliable sequence number received from each connection. */
  const lastReliableSequence = new WeakMap<Connection, number>();
  const rooms = new Map<string, { sid: string; createdAt: bigint }>();
  const roomApiRequests: string[] = [];
  const createdRooms: LiveKitServerFake['createdRooms'] = new Map();

  /** Whether a request carries a token of a cut-off identity (read unverified: the cut is below HTTP). */
  function isCut(req: IncomingMessage, url: URL): boolean {
    if (cut.size === 0) return false;
    const header = req.headers.authorization;
    const token = header?.startsWith('Bearer ') ? header.slice(7) : url.searchParams.get('access_token');
    try {
      const sub = (JSON.parse(Buffer.from(token?.split('.')[1] ?? '', 'base64url').toString('utf8')) as { sub?: unknown }).sub;
      return typeof sub === 'string' && cut.has(sub);
    } catch {
      return false;
    }
  }

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
    if (isCut(req, url)) {
      droppedWhileCut.push(`http ${url.pathname}`);
      return void req.socket.destroy();
    }
    // CORS for every origin on every HTTP answer, 404s included, as LiveKit's outermost middleware
    // (rs/cors, any origin, any header) does: browsers read /rtc/validate from the page's origin.
    const origin = req.headers.origin;
    if (origin) {
      res.setHeader('Access-Control-Allow-Origin', origin);
      res.setHeader('Vary', 'Origin');
      if (req.method === 'OPTIONS' && req.headers['access-control-request-method']) {
        const headers = req.headers['access-control-request-headers'];
        return void res
          .writeHead(204, { 'Access-Control-Allow-Methods': String(req.headers['access-control-request-method']).toUpperCase(), ...(headers ? { 'Access-Control-Allow-Headers': headers } : {}), 'Access-Control-Max-Age': '86400' })
          .end();
      }
    }
    const twirp = url.pathname.match(/^\/twirp\/livekit\.RoomService\/(\w+)$/)?.[1];
    if (twirp && req.method === 'POST') return void roomService(twirp, req, res).catch((error: unknown) => twirpError(res, 500, 'internal', String(error)));
    if (req.method !== 'GET' || url.pathname !== '/rtc/validate') return void res.writeHead(404).end('404 page not found\n');
    void authenticate(req, url).then((auth) => {
      const status = 'status' in auth ? auth.status : 200;
      validations.push(status);
      res.writeHead(status, { 'Content-Type': 'text/plain' }).end('status' in auth ? auth.reason : 'success');
    });
  });
  const wss = new WebSocketServer({ noServer: true, maxPayload: 1 << 20 });

  function twirpError(res: ServerResponse, status: number, code: string, msg: string): void {
    if (!res.headersSent) res.writeHead(status, { 'Content-Type': 'application/json' }).end(JSON.stringify({ code, msg }));
  }

  /** The room API (Twirp, JSON) on the same port, as LiveKit serves it: CreateRoom and DeleteRoom. */
  async function roomService(method: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
    roomApiRequests.push(method);
    const auth = req.headers.authorization;
    try {
      const claims = await verifier.verify(auth?.startsWith('Bearer ') ? auth.slice(7) : '');
      if (!claims.video?.roomCreate) return twirpError(res, 403, 'permission_denied', 'roomCreate grant required');
    } catch {
      return twirpError(res, 401, 'unauthenticated', 'invalid token');
    }
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const input = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as Record<string, unknown>;
    if (method === 'CreateRoom') {
      const name = String(input.name ?? '');
      if (!name) return twirpError(res, 400, 'invalid_argument', 'name is required');
      let room = rooms.get(name);
      if (!room) rooms.set(name, (room = { sid: sid('RM'), createdAt: BigInt(Math.floor(Date.now() / 1000)) }));
      createdRooms.set(name, { name, emptyTimeout: Number(input.emptyTimeout ?? 0), maxParticipants: Number(input.maxParticipants ?? 0) });
      res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ sid: room.sid, name, emptyTimeout: input.emptyTimeout ?? 0, maxParticipants: input.maxParticipants ?? 0, creationTime: String(room.createdAt) }));
      return;
    }
    if (method === 'DeleteRoom') {
      const name = String(input.room ?? '');
      if (!rooms.has(name)) return twirpError(res, 404, 'not_found', 'room not found');
      createdRooms.delete(name);
      deleteRoom(name);
      res.writeHead(200, { 'Content-Type': 'application/json' }).end('{}');
      return;
    }
    twirpError(res, 404, 'bad_route', `method ${method} not implemented by the fake`);
  }

  function refuse(socket: Socket, path: string, status: number, reason: string): void {
    refusedUpgrades.push({ path, status, reason });
    const text = status === 404 ? 'Not Found' : 'Unauthorized';
    socket.end(`HTTP/1.1 ${status} ${text}\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(reason)}\r\nConnection: close\r\n\r\n${reason}`);
  }

  server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    socket.on('error', () => undefined); // a client that hangs up during the token check
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (isCut(req, url)) {
      droppedWhileCut.push(`ws ${url.pathname}${url.searchParams.get('reconnect') === '1' ? ' (resume)' : ''}`);
      return void socket.destroy();
    }
    if (url.pathname !== '/rtc') return refuse(socket, url.pathname, 404, '404 page not found\n');
    void authenticate(req, url).then((auth) => {
      if ('status' in auth) return refuse(socket, url.pathname, auth.status, auth.reason);
      const query = Object.fromEntries(url.searchParams);
      wss.handleUpgrade(req, socket, head, (ws) => (query.reconnect === '1' || query.reconnect === 'true' ? resume(ws, auth.grant, query) : join(ws, auth.grant, query)));
    });
  });

  function send(conn: Connection, message: SignalResponse['message']): void {
    if (!conn.closed && conn.ws.readyState === conn.ws.OPEN) conn.ws.send(enc(message));
  }

  /**
   * A resume (`reconnect=1&sid=...`: the SDK lost its signalling socket and tries to keep its
   * session). Not modelled beyond LiveKit's answer when it cannot resume: this fake forgets a
   * participant as soon as its socket closes, so, as LiveKit does for a participant it no longer
   * has, it answers with a LeaveRequest (STATE_MISMATCH, action RECONNECT, can_reconnect) and
   * closes; the SDK then reconnects in full (a new join, its tracks published again). A
   * participant whose earlier socket is somehow still open is closed first (LiveKit would resume it).
   */
  function resume(ws: WebSocket, grant: ClaimGrants, query: Record<string, string>): void {
    const roomName = grant.video!.room!;
    for (const old of [...connections].filter((c) => c.participant.room === roomName && c.participant.identity === grant.sub && c.participant.sid === query.sid)) {
      disconnect(old, 'socket_closed');
      old.ws.close(1000);
    }
    resumesRefused.push(grant.sub!);
    ws.send(enc({ case: 'leave', value: new LeaveRequest({ canReconnect: true, reason: DisconnectReason.STATE_MISMATCH, action: LeaveRequest_Action.RECONNECT }) }));
    ws.close(1000);
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
      subscriberState: 'none',
      forwarded: [],
      dataSent: [],
      dropped: [],
    };
    participants.push(participant);
    const permission = permissionOf(grant);
    const conn: Connection = {
      participant,
      permission,
      ws,
      remoteSet: false,
      pendingCandidates: [],
      sinks: [],
      media: new Map(),
      autoSubscribe: query.auto_subscribe !== '0' && query.auto_subscribe !== 'false',
      wanted: new Set(),
      closed: false,
    };
    const otherConns = [...connections].filter((c) => c.participant.room === roomName);
    connections.add(conn);
    send(conn, {
      case: 'join',
      value: new JoinResponse({
        room: new Room({ sid: room.sid, name: roomName, creationTime: room.createdAt, numParticipants: others.length + 1, emptyTimeout: 300, departureTimeout: 20 }),
        participant: info(conn),
        otherParticipants: otherConns.map((c) => info(c)),
        serverVersion: LIVEKIT_SERVER_FAKE_DEFAULTS.serverVersion,
        serverInfo: new ServerInfo({ edition: ServerInfo_Edition.Standard, version: LIVEKIT_SERVER_FAKE_DEFAULTS.serverVersion, protocol: 16, nodeId: 'ND_fake' }),
        iceServers: [],
        // A participant that may subscribe gets a subscriber connection, offered by the server at
        // once (with the data channels), and it is the primary one, as LiveKit does.
        subscriberPrimary: permission.canSubscribe,
        pingInterval: LIVEKIT_SERVER_FAKE_DEFAULTS.pingIntervalS,
        pingTimeout: LIVEKIT_SERVER_FAKE_DEFAULTS.pingTimeoutS,
      }),
    });
    broadcast(conn, info(conn));
    if (permission.canSubscribe) {
      subscriberSide(conn);
      for (const other of otherConns) for (const sid of other.media.keys()) forward(other, sid, conn);
      void negotiate(conn);
    }
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      if (!isBinary) return void participant.requests.push('<text>');
      let request: SignalRequest;
      try {
        request = SignalRequest.fromBinary(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
      } catch {
        return void participant.requests.push('<undecodable>');
      }
      // Not serialised: the SDK never offers again before its previous offer was answered, and a
      // slow negotiation must not hold back pings (the SDK leaves after 15 s without a pong).
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
      // From the token, as LiveKit does: `attributes` (e.g. an avatar's `lk.publish_on_behalf`)
      // and `kind` (`agent` for agent workers); the client's advertised data protocol (the SDKs
      // pick RPC over data streams or data packets by it).
      attributes: { ...(p.grant.attributes ?? {}) },
      kind: participantKindOf(p.grant.kind),
      clientProtocol: Number(p.query.client_protocol ?? 0) || 0,
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
      case 'answer':
        return subscriberAnswer(conn, m.value);
      case 'subscription':
        return subscription(conn, m.value);
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
    broadcast(conn, info(conn));
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
    pc.ondatachannel = ({ channel }) => {
      const kind = channel.label === '_reliable' ? 'reliable' : channel.label === '_lossy' ? 'lossy' : null;
      if (!kind) return; // the SDK's data-track channel: not modelled
      channel.binaryType = 'arraybuffer';
      channel.onmessage = ({ data }) => {
        if (data instanceof ArrayBuffer) relayData(conn, kind, new Uint8Array(data));
      };
    };
    return pc;
  }

  function receive(conn: Connection, track: MediaStreamTrack): void {
    if (conn.closed) return;
    const p = conn.participant;
    const published = p.tracks.find((t) => t.cid === track.id);
    if (published) {
      published.received = true;
      conn.media.set(published.sid, track);
      for (const other of connections) if (other !== conn && other.participant.room === p.room) forward(conn, published.sid, other);
    } else p.refusals.push(`media for unannounced track ${track.id}`);
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
    const started = Date.now();
    const slow = setTimeout(() => conn.participant.refusals.push(`slow: the publisher answer is not ready after ${Date.now() - started} ms`), 5000);
    try {
      await answerNow(conn, offer);
    } finally {
      clearTimeout(slow);
    }
  }

  async function answerNow(conn: Connection, offer: SessionDescription): Promise<void> {
    // An offer handled after the participant left (its socket closed, the fake closed) makes no
    // connection: one made then was never closed, and kept the test process alive (issue 23).
    if (conn.closed) return;
    const pc = publisherPc(conn);
    await pc.setRemoteDescription({ type: 'offer', sdp: offer.sdp });
    conn.remoteSet = true;
    for (const c of conn.pendingCandidates.splice(0)) await pc.addIceCandidate(c).catch(() => undefined);
    const local = await pc.createAnswer();
    await pc.setLocalDescription(local);
    if (conn.closed) return;
    // The answer as created, its candidates trickled (as LiveKit's server does; the SDKs hold early
    // ones). Never `pc.localDescription`: wrtc serialises it on this thread while libwebrtc's
    // signalling thread adds gathered candidates to it (SIGSEGV in webrtc::SdpSerialize, local CI run N).
    send(conn, { case: 'answer', value: new SessionDescription({ type: 'answer', sdp: local.sdp ?? '', id: offer.id }) });
  }

  async function trickle(conn: Connection, req: TrickleRequest): Promise<void> {
    const init = JSON.parse(req.candidateInit) as RTCIceCandidateInit;
    if (!init.candidate) return;
    if (req.target === SignalTarget.SUBSCRIBER) {
      const sub = conn.sub;
      if (!sub) return;
      if (!sub.remoteSet) return void sub.pendingCandidates.push(init);
      await sub.pc.addIceCandidate(init).catch(() => undefined);
      return;
    }
    if (!conn.remoteSet) return void conn.pendingCandidates.push(init);
    if (conn.closed) return;
    await publisherPc(conn).addIceCandidate(init).catch(() => undefined);
  }

  /** ParticipantUpdate with `participant` to everyone else in its room (joins, publications). */
  function broadcast(from: Connection, participant: ParticipantInfo): void {
    for (const other of connections) {
      if (other !== from && other.participant.room === from.participant.room) send(other, { case: 'update', value: new ParticipantUpdate({ participants: [participant] }) });
    }
  }

  /** The subscriber PeerConnection of `conn`: the server offers it, with both data channels. */
  function subscriberSide(conn: Connection): SubscriberSide {
    if (conn.sub) return conn.sub;
    const wrtc = wrtcWithSources();
    const pc = new wrtc.RTCPeerConnection({ iceServers: [] });
    const channels = new Map<'reliable' | 'lossy', RTCDataChannel>([
      ['reliable', pc.createDataChannel('_reliable', { ordered: true })],
      ['lossy', pc.createDataChannel('_lossy', { ordered: false, maxRetransmits: 0 })],
    ]);
    const sub: SubscriberSide = { pc, channels, queued: [], senders: new Map(), remoteSet: false, pendingCandidates: [], offering: false, again: false, offerId: 0 };
    conn.sub = sub;
    for (const channel of channels.values()) {
      channel.binaryType = 'arraybuffer';
      channel.onopen = () => {
        for (const q of sub.queued.splice(0)) deliverData(conn, q.kind, q.bytes);
      };
    }
    pc.onicecandidate = (event) => {
      const c = event.candidate;
      if (!c) return;
      const init = JSON.stringify({ candidate: c.candidate, sdpMid: c.sdpMid, sdpMLineIndex: c.sdpMLineIndex, usernameFragment: c.usernameFragment ?? undefined });
      send(conn, { case: 'trickle', value: new TrickleRequest({ candidateInit: init, target: SignalTarget.SUBSCRIBER }) });
    };
    pc.onconnectionstatechange = () => {
      conn.participant.subscriberState = pc.connectionState;
      if (pc.connectionState === 'connected' && conn.participant.state === 'joined') conn.participant.state = 'active';
    };
    return sub;
  }

  /** Sends a (re)offer of the subscriber connection; one at a time, again after the answer if needed. */
  async function negotiate(conn: Connection): Promise<void> {
    const sub = conn.sub;
    if (!sub || conn.closed) return;
    if (sub.offering) return void (sub.again = true);
    sub.offering = true;
    sub.again = false;
    try {
      const offer = await sub.pc.createOffer();
      await sub.pc.setLocalDescription(offer);
      if (conn.closed) return;
      // As created, never read back (see answerNow).
      send(conn, { case: 'offer', value: new SessionDescription({ type: 'offer', sdp: offer.sdp ?? '', id: ++sub.offerId }) });
    } catch (error) {
      sub.offering = false;
      conn.participant.refusals.push(`internal: subscriber offer failed: ${error instanceof Error ? error.message : String(error)}`);
    }
  }

  async function subscriberAnswer(conn: Connection, answerSdp: SessionDescription): Promise<void> {
    const sub = conn.sub;
    if (!sub || !sub.offering) return void conn.participant.refusals.push('answer without a subscriber offer');
    await sub.pc.setRemoteDescription({ type: 'answer', sdp: withStartBitrate(answerSdp.sdp) });
    sub.remoteSet = true;
    for (const c of sub.pendingCandidates.splice(0)) await sub.pc.addIceCandidate(c).catch(() => undefined);
    sub.offering = false;
    if (sub.again) await negotiate(conn);
  }

  /** UpdateSubscription: explicit (un)subscribing, for participants that joined without auto-subscribe. */
  function subscription(conn: Connection, req: UpdateSubscription): void {
    const sids = [...req.trackSids, ...req.participantTracks.flatMap((pt) => pt.trackSids)];
    let changed = false;
    for (const sid of sids) {
      if (req.subscribe) {
        conn.wanted.add(sid);
        const owner = [...connections].find((c) => c.media.has(sid) && c.participant.room === conn.participant.room);
        if (owner) changed = forward(owner, sid, conn, false) || changed;
      } else {
        conn.wanted.delete(sid);
        const sender = conn.sub?.senders.get(sid);
        if (sender && conn.sub) {
          conn.sub.senders.delete(sid);
          try {
            conn.sub.pc.removeTrack(sender);
            changed = true;
          } catch (error) {
            conn.participant.dropped.push(`unsubscribing ${sid}: ${describe(error)}`);
          }
        }
      }
    }
    if (changed) void negotiate(conn);
  }

  /**
   * Adds `from`'s received track `trackSid` to `to`'s subscriber connection, in a stream whose id
   * is `<participant sid>|<track sid>` (the msid the SDK maps to participant and publication).
   * Renegotiates unless told not to; returns whether a track was added.
   */
  function forward(from: Connection, trackSid: string, to: Connection, renegotiate = true): boolean {
    const track = from.media.get(trackSid);
    const sub = to.sub;
    if (!track || !sub || to.closed || sub.senders.has(trackSid)) return false;
    if (!to.autoSubscribe && !to.wanted.has(trackSid)) return false;
    const { MediaStream } = wrtcWithSources();
    const stream = new (MediaStream as unknown as new (init: { id: string }) => MediaStream)({ id: `${from.participant.sid}|${trackSid}` });
    let sender: RTCRtpSender;
    try {
      sender = sub.pc.addTrack(track, stream);
    } catch (error) {
      to.participant.dropped.push(`track ${trackSid}: ${describe(error)}`);
      return false;
    }
    sub.senders.set(trackSid, sender);
    // libwebrtc re-encodes what it forwards (a real SFU forwards the packets): keep the
    // publisher's picture size rather than let the encoder scale it down to its start bitrate.
    if (track.kind === 'video') void sender.setParameters({ ...sender.getParameters(), degradationPreference: 'maintain-resolution' } as RTCRtpSendParameters).catch(() => undefined);
    to.participant.forwarded.push(trackSid);
    if (renegotiate) void negotiate(to);
    return true;
  }

  /**
   * A DataPacket from `from`, handled as LiveKit's participant and room do it
   * (`handleReceivedDataMessage`, `BroadcastDataPacketForRoom`): see `inspectDataPacket`. The
   * packet is re-encoded with the sender stamped and sent on the same kind of subscriber data
   * channel of every other participant of the room, or of its destination identities only.
   */
  function relayData(from: Connection, kind: 'reliable' | 'lossy', bytes: Uint8Array): void {
    let packet: DataPacket;
    try {
      packet = DataPacket.fromBinary(bytes);
    } catch {
      return void from.participant.refusals.push('undecodable data packet');
    }
    if (!from.permission.canPublishData) return void from.participant.refusals.push('data packet without canPublishData');
    const p = from.participant;
    if (kind === 'reliable' && packet.sequence > 0) {
      // Reliable packets carry a per-sender sequence; LiveKit drops one it has already passed
      // (a resent duplicate after a reconnect).
      const last = lastReliableSequence.get(from) ?? 0;
      if (packet.sequence <= last) return void p.refusals.push(`reliable data packet ${packet.sequence} out of order (last ${last})`);
      lastReliableSequence.set(from, packet.sequence);
    }
    const inspected = inspectDataPacket(packet, p, kind);
    if (!inspected.forward) {
      if (inspected.refusal) p.refusals.push(inspected.refusal);
      return;
    }
    const destinations = new Set(packet.destinationIdentities);
    const out = packet.toBinary();
    const deliveredTo: string[] = [];
    for (const other of connections) {
      if (other === from || other.participant.room !== p.room || !other.sub) continue;
      if (destinations.size > 0 && !destinations.has(other.participant.identity)) continue;
      deliverData(other, kind, out);
      deliveredTo.push(other.participant.identity);
    }
    p.dataSent.push({ kind, type: inspected.type, topic: inspected.topic, bytes: inspected.bytes, deliveredTo });
  }

  function deliverData(to: Connection, kind: 'reliable' | 'lossy', bytes: Uint8Array): void {
    const sub = to.sub;
    if (!sub || to.closed) return;
    const channel = sub.channels.get(kind)!;
    if (channel.readyState !== 'open') {
      if (channel.readyState === 'connecting') sub.queued.push({ kind, bytes });
      return;
    }
    try {
      channel.send(bytes as Uint8Array<ArrayBuffer>);
    } catch (error) {
      // Closing under the send (wrtc throws InvalidStateError from inside an event handler: an
      // uncaught exception in the test process, issue 23).
      to.participant.dropped.push(`${kind} data packet: ${describe(error)}`);
    }
  }

  function disconnect(conn: Connection, by: NonNullable<FakeParticipant['leftBy']>): void {
    if (conn.closed) return;
    conn.closed = true;
    connections.delete(conn);
    conn.participant.state = 'disconnected';
    conn.participant.leftBy = by;
    for (const sink of conn.sinks.splice(0)) sink.stop();
    const sub = conn.sub;
    if (sub) {
      for (const channel of sub.channels.values()) channel.onopen = null;
      sub.pc.onicecandidate = null;
      sub.pc.onconnectionstatechange = null;
      sub.pc.close();
      conn.participant.subscriberState = 'closed';
    }
    // The others are told, and stop receiving its tracks.
    for (const other of connections) {
      if (other.participant.room !== conn.participant.room) continue;
      // LiveKit names why a participant left (ParticipantInfo.disconnect_reason); the fake names the
      // room's deletion only (the reason a room's other members act on).
      const reason = by === 'room_deleted' ? { disconnectReason: DisconnectReason.ROOM_DELETED } : {};
      send(other, { case: 'update', value: new ParticipantUpdate({ participants: [new ParticipantInfo({ sid: conn.participant.sid, identity: conn.participant.identity, state: ParticipantInfo_State.DISCONNECTED, ...reason })] }) });
      let removed = false;
      for (const sid of conn.media.keys()) {
        const sender = other.sub?.senders.get(sid);
        if (!sender || !other.sub) continue;
        other.sub.senders.delete(sid);
        try {
          other.sub.pc.removeTrack(sender);
          removed = true;
        } catch {
          // its connection is closing
        }
      }
      if (removed) void negotiate(other);
    }
    conn.media.clear();
    if (conn.pc) {
      conn.pc.onicecandidate = null;
      conn.pc.ontrack = null;
      conn.pc.onconnectionstatechange = null;
      conn.pc.close();
      conn.participant.publisherState = 'closed';
    }
  }

  function deleteRoom(room: string): number {
    const removed = [...connections].filter((conn) => conn.participant.room === room);
    for (const conn of removed) {
      send(conn, { case: 'leave', value: new LeaveRequest({ canReconnect: false, reason: DisconnectReason.ROOM_DELETED, action: LeaveRequest_Action.DISCONNECT }) });
      disconnect(conn, 'room_deleted');
      conn.ws.close(1000);
    }
    rooms.delete(room);
    return removed.length;
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
    roomApiRequests,
    createdRooms,
    deleteRoom,
    droppedWhileCut,
    resumesRefused,
    cutOff(identity) {
      cut.add(identity);
      const victims = [...connections].filter((c) => c.participant.identity === identity);
      for (const conn of victims) {
        disconnect(conn, 'cut_off');
        conn.ws.terminate();
      }
      return victims.length;
    },
    restore(identity) {
      cut.delete(identity);
    },
    dropSignal(identity) {
      const victims = [...connections].filter((c) => c.participant.identity === identity);
      for (const conn of victims) conn.ws.terminate();
      return victims.length;
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

/** A thrown value as `Name: message` (wrtc's DOMExceptions say what failed in their name). */
function describe(error: unknown): string {
  const e = error as { name?: unknown; message?: unknown } | null;
  return typeof e?.name === 'string' && typeof e.message === 'string' ? `${e.name}: ${e.message}` : String(error);
}
