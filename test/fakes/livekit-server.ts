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
 * A small SFU, for rooms where participants hear and see each other (sessions in LiveKit rooms),
 * that forwards RTP packets as LiveKit does and decodes nothing (livekit-media.ts, on werift), in
 * a process of its own (`startLiveKitServerFake`, livekit-server-process.ts; what it records is
 * mirrored into the test process):
 * - Publisher PeerConnection (client offers, the fake answers with Opus and VP8). What arrives is
 *   read from the packets (frames by marker bit, picture size from VP8 key frames, audio level
 *   from the RFC 6464 header extension); a received track is matched to its published track by
 *   the track id in its msid, which is the `cid` of the AddTrackRequest.
 * - Subscriber PeerConnection, for participants whose grant allows subscribing (others, such as
 *   a publish-only avatar token, keep `subscriber_primary: false` and get none): the JoinResponse
 *   says `subscriber_primary: true` and the server offers at once, with its `_reliable` and
 *   `_lossy` data channels; it re-offers (one offer at a time) when forwarded tracks come or go.
 * - Forwarding: each received track is added to the subscriber connection of every other
 *   participant of the room (all of them with `auto_subscribe`, the default; else those that
 *   asked with UpdateSubscription) in a stream whose id is `<participant sid>|<track sid>`, the
 *   msid the SDK maps to participant and publication: each packet is copied to it unchanged but
 *   for SSRC, payload type and contiguous sequence numbers; video starts on a key frame (the
 *   publisher is asked for one, and subscribers' PLIs are passed on). Of a simulcast publication
 *   the largest layer is forwarded.
 * - Media before data: a connection's bulk data (large DTLS datagrams: the SCTP of data channels)
 *   waits while the media that came with it is forwarded (`prioritizeMedia`, livekit-media.ts),
 *   as a LiveKit server's data path, on goroutines of its own, does not hold up its media. And
 *   werift's SCTP delivers every complete message (`mendSctpReassembly`: its own can leave one in
 *   its reassembly buffer for good, werift-webrtc issue 706).
 * - ICE: one host candidate, on `mediaAddress` (127.0.0.1 unless a test's participants are in
 *   network namespaces), ICE lite, no TURN.
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
 * Not modelled: resuming a session (see above), ICE restarts, layer selection per subscriber
 * (the largest simulcast layer goes to everyone), RTX, congestion control (TWCC, REMB), adaptive stream and
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
import type { MediaStreamTrack as WeriftTrack, RTCDataChannel, RTCIceCandidate, RTCPeerConnection, RTCRtpReceiver as WeriftReceiver } from 'werift';
import { candidateAddress, DownTrack, emptyReceivedMedia, inactiveNotRejected, largestLayer, LIVEKIT_MEDIA_FAKE_DEFAULTS, onlyAddress, sfuPeerConnection, UpTrack, type FakeReceivedMedia } from './livekit-media.ts';

export type { FakeReceivedMedia } from './livekit-media.ts';
export { startLiveKitServerFake } from './livekit-server-process.ts';

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
  /** The address the media plane binds and gives out as its only ICE candidate. */
  mediaAddress: '127.0.0.1',
  ...LIVEKIT_MEDIA_FAKE_DEFAULTS,
} as const;

export interface LiveKitServerFakeOptions {
  readonly apiKey?: string;
  readonly apiSecret?: string;
  /** An audio packet whose RFC 6464 level is at most this (-dBov) counts as sound. */
  readonly audibleDbov?: number;
  /**
   * Where the media plane listens (its one ICE candidate): 127.0.0.1 by default; a test whose
   * participants are in network namespaces gives an address they reach (the root side of a veth).
   */
  readonly mediaAddress?: string;
  /**
   * Holds every publisher answer this long (ms) before it is made, as a loaded or distant server
   * would (a test's fault, no LiveKit setting): 0 by default.
   */
  readonly answerDelayMs?: number;
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
  /** Whether its track arrived on the publisher PeerConnection (negotiated; packets are counted in `media`). */
  received: boolean;
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
  /**
   * Every description exchanged, summarised (`publisher offer 1: audio sendonly 0 <track id>, ...`),
   * in order: what a negotiation that went wrong held.
   */
  readonly negotiations: string[];
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
  deleteRoom(room: string): Promise<number>;
  /**
   * A network cut between the participants of `identity` and this server (a test's fault, no
   * LiveKit API): their signalling sockets are dropped without a close handshake, their peer
   * connections closed (the others are told they left), and every later connection carrying a
   * token of that identity (signalling on any path, /rtc/validate) is dropped before an answer, as
   * an unreachable server would be, until `restore(identity)`. Returns how many were cut.
   */
  cutOff(identity: string): Promise<number>;
  restore(identity: string): Promise<void>;
  /**
   * Drops the signalling sockets of `identity` without a close handshake (a test's fault, as a
   * network blip would): the fake forgets those participants as for any closed socket, and their
   * SDK's resume gets the LeaveRequest of `resume` (then it joins again). Returns how many.
   */
  dropSignal(identity: string): Promise<number>;
  /** Signalling connections of a cut-off identity dropped since (what its SDK tried meanwhile). */
  readonly droppedWhileCut: string[];
  /** Identities whose resume (`reconnect=1`) was answered with a LeaveRequest (action RECONNECT). */
  readonly resumesRefused: string[];
  /** The process the fake runs in (a bench reads its CPU time). */
  readonly pid: number;
  /** The inbound-rtp figures of a participant's publisher connection (diagnostics). */
  inboundStats(participantSid: string): Promise<Array<Record<string, unknown>>>;
  close(): Promise<void>;
}

const enc = (response: SignalResponse['message']): Uint8Array => new SignalResponse({ message: response }).toBinary();
const sid = (prefix: string): string => `${prefix}_${randomBytes(9).toString('base64url')}`;
const SOURCES: Record<string, TrackSource> = { camera: TrackSource.CAMERA, microphone: TrackSource.MICROPHONE, screen_share: TrackSource.SCREEN_SHARE, screen_share_audio: TrackSource.SCREEN_SHARE_AUDIO };

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

/** For the host process (livekit-server-host.ts). */
export interface FakeHooks {
  /** Called before the fake sends anything to a client, so a mirror of its state is never behind what a client was told. */
  readonly beforeAnswer?: () => void;
}

interface SubscriberSide {
  readonly pc: RTCPeerConnection;
  /** Server-created data channels (`_reliable`, `_lossy`), what the SDK receives data on. */
  readonly channels: Map<'reliable' | 'lossy', RTCDataChannel>;
  /** Packets waiting for their channel to open. */
  readonly queued: Array<{ kind: 'reliable' | 'lossy'; bytes: Uint8Array }>;
  /** Track sid -> the DownTrack carrying it. */
  readonly senders: Map<string, DownTrack>;
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
  /** The received media of this participant's published tracks, by track sid (what is forwarded). */
  readonly media: Map<string, UpTrack>;
  /** Subscriber connection: only for participants allowed to subscribe (subscriber_primary). */
  sub?: SubscriberSide;
  /** `auto_subscribe` (default on, as in the SDKs) or the sids asked for with UpdateSubscription. */
  readonly autoSubscribe: boolean;
  readonly wanted: Set<string>;
  closed: boolean;
}

/**
 * The fake in this process. Tests use `startLiveKitServerFake` (livekit-server-process.ts), which
 * runs this in a process of its own, as a LiveKit server is: its media plane (werift, on the
 * event loop) then neither slows nor is slowed by the bots and SDKs of the test process.
 */
export async function startLiveKitServerFakeHere(options: LiveKitServerFakeOptions = {}, hooks: FakeHooks = {}): Promise<LiveKitServerFake> {
  /** Before every answer (HTTP, signalling): the host process sends what changed first. */
  const beforeAnswer = hooks.beforeAnswer ?? (() => undefined);
  const apiKey = options.apiKey ?? LIVEKIT_SERVER_FAKE_DEFAULTS.apiKey;
  const apiSecret = options.apiSecret ?? LIVEKIT_SERVER_FAKE_DEFAULTS.apiSecret;
  const audibleDbov = options.audibleDbov ?? LIVEKIT_SERVER_FAKE_DEFAULTS.audibleDbov;
  const mediaAddress = options.mediaAddress ?? LIVEKIT_SERVER_FAKE_DEFAULTS.mediaAddress;
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
      beforeAnswer();
      res.writeHead(status, { 'Content-Type': 'text/plain' }).end('status' in auth ? auth.reason : 'success');
    });
  });
  const wss = new WebSocketServer({ noServer: true, maxPayload: 1 << 20 });

  function twirpError(res: ServerResponse, status: number, code: string, msg: string): void {
    beforeAnswer();
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
      beforeAnswer();
      res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ sid: room.sid, name, emptyTimeout: input.emptyTimeout ?? 0, maxParticipants: input.maxParticipants ?? 0, creationTime: String(room.createdAt) }));
      return;
    }
    if (method === 'DeleteRoom') {
      const name = String(input.room ?? '');
      if (!rooms.has(name)) return twirpError(res, 404, 'not_found', 'room not found');
      createdRooms.delete(name);
      deleteRoom(name);
      beforeAnswer();
      res.writeHead(200, { 'Content-Type': 'application/json' }).end('{}');
      return;
    }
    twirpError(res, 404, 'bad_route', `method ${method} not implemented by the fake`);
  }

  function refuse(socket: Socket, path: string, status: number, reason: string): void {
    refusedUpgrades.push({ path, status, reason });
    beforeAnswer();
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
    if (conn.closed || conn.ws.readyState !== conn.ws.OPEN) return;
    beforeAnswer();
    conn.ws.send(enc(message));
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
    beforeAnswer();
    ws.send(enc({ case: 'leave', value: new LeaveRequest({ canReconnect: true, reason: DisconnectReason.STATE_MISMATCH, action: LeaveRequest_Action.RECONNECT }) }));
    ws.close(1000);
  }

  function join(ws: WebSocket, grant: ClaimGrants, query: Record<string, string>): void {
    const roomName = grant.video!.room!;
    let room = rooms.get(roomName);
    if (!room) rooms.set(roomName, (room = { sid: sid('RM'), createdAt: BigInt(Math.floor(Date.now() / 1000)) }));
    // LiveKit admits the newcomer and removes an earlier participant with the same identity.
    for (const old of [...connections].filter((c) => c.participant.room === roomName && c.participant.identity === grant.sub)) {
      // Its end recorded (and mirrored) before it is told, so a test that sees the old client
      // leave reads why.
      const open = old.ws.readyState === old.ws.OPEN;
      disconnect(old, 'replaced');
      beforeAnswer();
      if (open) old.ws.send(enc({ case: 'leave', value: new LeaveRequest({ canReconnect: false, reason: DisconnectReason.DUPLICATE_IDENTITY, action: LeaveRequest_Action.DISCONNECT }) }));
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
      media: emptyReceivedMedia(),
      requests: [],
      negotiations: [],
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
        beforeAnswer(); // its end mirrored before the client sees the close
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

  /**
   * Our ICE candidates to the SDK, as LiveKit trickles them (no end-of-candidates): only those of
   * the media address (`onlyAddress`), never before the description of that connection was sent,
   * and none that description already carries. werift's ICE lite gathers while
   * setLocalDescription runs and writes what it has into the description, so in practice nothing
   * is trickled; a copy trickled ahead of the description would reach the SDK before it has a
   * remote description (rtc-node queues such candidates and applies them after it, and any that
   * fails to apply there ends that negotiation step early).
   */
  const trickles = new WeakMap<RTCPeerConnection, { sent?: string; held: RTCIceCandidate[] }>();
  const trickleState = (pc: RTCPeerConnection): { sent?: string; held: RTCIceCandidate[] } => {
    let state = trickles.get(pc);
    if (!state) trickles.set(pc, (state = { held: [] }));
    return state;
  };
  const side = (target: SignalTarget): string => (target === SignalTarget.PUBLISHER ? 'publisher' : 'subscriber');

  function trickleOut(conn: Connection, pc: RTCPeerConnection, target: SignalTarget, c: RTCIceCandidate | undefined): void {
    if (!c?.candidate || candidateAddress(c.candidate) !== mediaAddress) return;
    const state = trickleState(pc);
    if (state.sent === undefined) return void state.held.push(c);
    if (state.sent.includes(c.candidate) || conn.closed) return;
    const init = JSON.stringify({ candidate: c.candidate, sdpMid: c.sdpMid, sdpMLineIndex: c.sdpMLineIndex, usernameFragment: c.usernameFragment ?? undefined });
    // Recorded before it is sent (send() mirrors the state first): a client never sees what the record lacks.
    conn.participant.negotiations.push(`${side(target)} trickle: ${init}`);
    send(conn, { case: 'trickle', value: new TrickleRequest({ candidateInit: init, target }) });
  }

  /** Sends the description of `pc` (answer or offer), then the candidates held until it went; `note` goes into its record. */
  function sendDescription(conn: Connection, pc: RTCPeerConnection, target: SignalTarget, description: SessionDescription, note = ''): void {
    const state = trickleState(pc);
    conn.participant.negotiations.push(`${side(target)} ${description.type} ${description.id}: ${sections(description.sdp)}${note}`);
    send(conn, { case: description.type === 'answer' ? 'answer' : 'offer', value: description });
    if (state.sent === undefined) {
      state.sent = description.sdp;
      for (const c of state.held.splice(0)) trickleOut(conn, pc, target, c);
    }
  }

  /** A description as the SDKs get it: inactive sections not rejected, only the media address's candidates. */
  const described = (sdp: string): string => onlyAddress(inactiveNotRejected(sdp), mediaAddress);

  function publisherPc(conn: Connection): RTCPeerConnection {
    if (conn.pc) return conn.pc;
    const pc = sfuPeerConnection(mediaAddress);
    conn.pc = pc;
    pc.onicecandidate = ({ candidate }) => trickleOut(conn, pc, SignalTarget.PUBLISHER, candidate);
    pc.onconnectionstatechange = () => {
      conn.participant.publisherState = pc.connectionState;
      if (pc.connectionState === 'connected' && conn.participant.state === 'joined') conn.participant.state = 'active';
    };
    // werift reports every remote track again at each renegotiation: one UpTrack per receiver.
    const seen = new WeakSet<object>();
    pc.ontrack = ({ track, receiver }) => {
      if (seen.has(receiver)) return;
      seen.add(receiver);
      receive(conn, track, receiver);
    };
    pc.ondatachannel = ({ channel }) => {
      const kind = channel.label === '_reliable' ? 'reliable' : channel.label === '_lossy' ? 'lossy' : null;
      if (!kind) return; // the SDK's data-track channel: not modelled
      channel.onMessage.subscribe((data) => {
        if (typeof data !== 'string') relayData(conn, kind, new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
      });
    };
    return pc;
  }

  function receive(conn: Connection, track: WeriftTrack, receiver: WeriftReceiver): void {
    if (conn.closed) return;
    const p = conn.participant;
    const cid = receiver.remoteTrackId ?? track.id;
    const published = p.tracks.find((t) => t.cid === cid);
    if (!published) return void p.refusals.push(`media for unannounced track ${cid}`);
    published.received = true;
    const up = new UpTrack(track.kind === 'video' ? 'video' : 'audio', largestLayer(receiver), receiver, p.media, audibleDbov);
    conn.media.set(published.sid, up);
    for (const other of connections) if (other !== conn && other.participant.room === p.room) forward(conn, published.sid, other);
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
    conn.participant.negotiations.push(`publisher offer ${offer.id}: ${sections(offer.sdp)}`);
    const offeredAt = performance.now();
    if (options.answerDelayMs) await new Promise((resolve) => setTimeout(resolve, options.answerDelayMs));
    const pc = publisherPc(conn);
    // werift gives an m-section that appears in a later offer a transceiver it takes from an
    // inactive one, and then renames it, so the inactive section's mid is gone from the answer
    // ("Transceiver with mid=7 not found": the SDKs' first publisher offer has recvonly sections
    // that stay inactive). Marked as used for sending, none is taken.
    for (const t of pc.getTransceivers()) (t as unknown as { usedForSender: boolean }).usedForSender = true;
    await pc.setRemoteDescription({ type: 'offer', sdp: offer.sdp });
    conn.remoteSet = true;
    for (const c of conn.pendingCandidates.splice(0)) await pc.addIceCandidate(c).catch(() => undefined);
    const local = await pc.createAnswer();
    await pc.setLocalDescription(local);
    if (conn.closed) return;
    sendDescription(conn, pc, SignalTarget.PUBLISHER, new SessionDescription({ type: 'answer', sdp: described(pc.localDescription?.sdp ?? local.sdp ?? ''), id: offer.id }), ` (after ${Math.round(performance.now() - offeredAt)} ms)`);
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
    const pc = sfuPeerConnection(mediaAddress);
    const channels = new Map<'reliable' | 'lossy', RTCDataChannel>([
      ['reliable', pc.createDataChannel('_reliable', { ordered: true })],
      ['lossy', pc.createDataChannel('_lossy', { ordered: false, maxRetransmits: 0 })],
    ]);
    const sub: SubscriberSide = { pc, channels, queued: [], senders: new Map(), remoteSet: false, pendingCandidates: [], offering: false, again: false, offerId: 0 };
    conn.sub = sub;
    for (const channel of channels.values()) {
      channel.stateChanged.subscribe((state) => {
        if (state === 'open') for (const q of sub.queued.splice(0)) deliverData(conn, q.kind, q.bytes);
      });
    }
    pc.onicecandidate = ({ candidate }) => trickleOut(conn, pc, SignalTarget.SUBSCRIBER, candidate);
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
      sendDescription(conn, sub.pc, SignalTarget.SUBSCRIBER, new SessionDescription({ type: 'offer', sdp: described(sub.pc.localDescription?.sdp ?? offer.sdp ?? ''), id: ++sub.offerId }));
    } catch (error) {
      sub.offering = false;
      conn.participant.refusals.push(`internal: subscriber offer failed: ${error instanceof Error ? error.message : String(error)}`);
    }
  }

  async function subscriberAnswer(conn: Connection, answerSdp: SessionDescription): Promise<void> {
    const sub = conn.sub;
    if (!sub || !sub.offering) return void conn.participant.refusals.push('answer without a subscriber offer');
    conn.participant.negotiations.push(`subscriber answer ${answerSdp.id}: ${sections(answerSdp.sdp)}`);
    await sub.pc.setRemoteDescription({ type: 'answer', sdp: answerSdp.sdp });
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
        if (unforward(conn, sid)) changed = true;
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
    const up = from.media.get(trackSid);
    const sub = to.sub;
    if (!up || !sub || to.closed || sub.senders.has(trackSid)) return false;
    if (!to.autoSubscribe && !to.wanted.has(trackSid)) return false;
    try {
      sub.senders.set(trackSid, DownTrack.open(up, sub.pc, `${from.participant.sid}|${trackSid}`, LIVEKIT_SERVER_FAKE_DEFAULTS.keyFrameRequestIntervalMs));
    } catch (error) {
      to.participant.dropped.push(`track ${trackSid}: ${describe(error)}`);
      return false;
    }
    to.participant.forwarded.push(trackSid);
    if (renegotiate) void negotiate(to);
    return true;
  }

  /** Stops forwarding `trackSid` to `to` (its transceiver goes inactive at the next offer); whether it was forwarded. */
  function unforward(to: Connection, trackSid: string): boolean {
    const down = to.sub?.senders.get(trackSid);
    if (!down) return false;
    to.sub!.senders.delete(trackSid);
    down.stop();
    try {
      down.transceiver.setDirection('inactive');
    } catch (error) {
      to.participant.dropped.push(`unsubscribing ${trackSid}: ${describe(error)}`);
    }
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
    const receivers = [...connections].filter((other) => other !== from && other.participant.room === p.room && other.sub && (destinations.size === 0 || destinations.has(other.participant.identity)));
    // Recorded (and the record sent to a mirroring parent) before the receivers can see the
    // packet: a test that waits for what a receiver got then reads what the sender sent.
    p.dataSent.push({ kind, type: inspected.type, topic: inspected.topic, bytes: inspected.bytes, deliveredTo: receivers.map((other) => other.participant.identity) });
    beforeAnswer();
    for (const other of receivers) deliverData(other, kind, out);
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
      channel.send(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    } catch (error) {
      // Closing under the send.
      to.participant.dropped.push(`${kind} data packet: ${describe(error)}`);
    }
  }

  function disconnect(conn: Connection, by: NonNullable<FakeParticipant['leftBy']>): void {
    if (conn.closed) return;
    conn.closed = true;
    connections.delete(conn);
    conn.participant.state = 'disconnected';
    conn.participant.leftBy = by;
    for (const up of conn.media.values()) up.stop();
    const sub = conn.sub;
    if (sub) {
      for (const down of sub.senders.values()) down.stop();
      sub.pc.onicecandidate = null;
      sub.pc.onconnectionstatechange = null;
      void sub.pc.close().catch(() => undefined);
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
      for (const sid of conn.media.keys()) if (unforward(other, sid)) removed = true;
      if (removed) void negotiate(other);
    }
    conn.media.clear();
    if (conn.pc) {
      conn.pc.onicecandidate = null;
      conn.pc.ontrack = null;
      conn.pc.onconnectionstatechange = null;
      void conn.pc.close().catch(() => undefined);
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
    pid: process.pid,
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
      for (const stat of (await conn.pc.getStats()).values()) {
        const s = stat as unknown as Record<string, unknown>;
        if (s.type === 'inbound-rtp') rows.push({ kind: s.kind, packetsReceived: s.packetsReceived, packetsLost: s.packetsLost, pliCount: s.pliCount, nackCount: s.nackCount });
      }
      return rows;
    },
    roomApiRequests,
    createdRooms,
    deleteRoom: async (room) => deleteRoom(room),
    droppedWhileCut,
    resumesRefused,
    async cutOff(identity) {
      cut.add(identity);
      const victims = [...connections].filter((c) => c.participant.identity === identity);
      for (const conn of victims) {
        disconnect(conn, 'cut_off');
        conn.ws.terminate();
      }
      return victims.length;
    },
    async restore(identity) {
      cut.delete(identity);
    },
    async dropSignal(identity) {
      const victims = [...connections].filter((c) => c.participant.identity === identity);
      for (const conn of victims) {
        // Recorded now, as its socket's close would later: the call answers after the state it changed.
        disconnect(conn, 'socket_closed');
        conn.ws.terminate();
      }
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

/** The m-sections of a description: kind, direction, mid and msid track id (`audio sendonly 0 TR_x`). */
function sections(sdp: string): string {
  return sdp
    .split(/\r?\nm=/)
    .slice(1)
    .map((m) => {
      const kind = m.split(' ')[0];
      const direction = /\r?\na=(sendrecv|sendonly|recvonly|inactive)/.exec(m)?.[1] ?? '?';
      const mid = /\r?\na=mid:(\S+)/.exec(m)?.[1] ?? '?';
      const track = /\r?\na=msid:\S+ (\S+)/.exec(m)?.[1];
      const rids = [...m.matchAll(/\r?\na=rid:(\S+) send/g)].map((r) => r[1]).join('/');
      return [kind, direction, mid, track, rids && `rids ${rids}`].filter(Boolean).join(' ');
    })
    .join(', ');
}

/** A thrown value as `Name: message` (wrtc's DOMExceptions say what failed in their name). */
function describe(error: unknown): string {
  const e = error as { name?: unknown; message?: unknown } | null;
  return typeof e?.name === 'string' && typeof e.message === 'string' ? `${e.name}: ${e.message}` : String(error);
}
