/**
 * One embedded room: at most one publication (the avatar) and a few subscribers (browsers).
 * Each subscriber gets its own server-side peer connection carrying fresh tracks of the
 * publication's sources, created when both sides are present. The room knows participants only
 * through a message channel, so the WebSocket glue stays in server/rooms and tests can drive a
 * room directly.
 */
import { randomUUID } from 'node:crypto';
import { errorMessage } from '../../core/error-message.ts';
import { Subject, type Observable } from 'rxjs';
import { RoomError } from './room-errors.ts';
import {
  SIGNALLING_PROTOCOL_VERSION,
  SignallingError,
  type PublisherInfo,
  type SignallingClientMessage,
  type SignallingErrorCode,
  type SignallingServerMessage,
} from '../../protocol/room-signalling.ts';
import { iceServersFor, RTC_NETWORK_DEFAULTS, type RtcNetworkSettings } from './rtc-network.ts';
import { SubscriberPeer, type PeerGatheringFailure, type SubscriberAudio, type SubscriberPeerOptions } from './subscriber-peer.ts';

/** A subscriber's microphone, 10 ms at a time, tagged with who spoke. */
export interface ParticipantAudio extends SubscriberAudio {
  readonly participantId: string;
}

/** A message a subscriber sent to the bot (`client_message`), tagged with who sent it. */
export interface RoomClientMessage {
  readonly participantId: string;
  readonly message: Readonly<Record<string, unknown>>;
}

/** A subscriber as the room sees it now: in the room, with its peer connection's state. */
export interface RoomSubscriberInfo {
  readonly participantId: string;
  /** `none` until the room has a publication to offer (and after it unpublished). */
  readonly peerState: RTCPeerConnectionState | 'none';
}

/**
 * Subscriber presence: `joined` (signalling joined), every change of its server-side peer
 * connection (`connected` = the avatar's media reaches it), `left` (left, socket gone, replaced,
 * room closed).
 */
export type RoomSubscriberEvent =
  | { readonly type: 'joined'; readonly participantId: string }
  | {
      readonly type: 'peer-state';
      readonly participantId: string;
      readonly state: RTCPeerConnectionState | 'none';
      /** With `failed` when the server gave up on its own: no usable candidate could be gathered. */
      readonly reason?: PeerGatheringFailure;
    }
  | { readonly type: 'left'; readonly participantId: string; readonly reason: string };

/** What the room needs from a participant's connection. */
export interface ParticipantChannel {
  send(message: SignallingServerMessage): void;
  /** Ends the connection after a fatal error or the room closing (the reason was sent before). */
  close(code: SignallingErrorCode | 'normal', reason: string): void;
}

/** The avatar's media in a room, as the room sees it. */
export interface RoomPublication {
  readonly participantId: string;
  readonly tracks: PublisherInfo['tracks'];
  /** Fresh tracks (one per kind) fed by the publication's sources, for one subscriber. */
  createTracks(): MediaStreamTrack[];
  /** The room closed under the publication: stop publishing. */
  onRoomClosed(reason: string): void;
}

/**
 * Joins one token may make: `burst` at once, then one more every `refillMs`. A join replaces the
 * token's previous connection, and each with the avatar published starts a peer connection (ICE
 * gathering, a media port, DTLS): a client rejoining in a loop with one valid token would
 * otherwise make them as fast as it can connect. A visitor reconnecting after a network change
 * (the widget retries a few times, seconds apart) stays far within it.
 */
export const ROOM_JOIN_LIMITS = {
  burst: 5,
  refillMs: 2_000,
} as const;

export interface RoomOptions extends SubscriberPeerOptions {
  readonly maxSubscribers: number;
  /** Clock time in ms (for how long the room has been empty). */
  readonly now: () => number;
  /**
   * When the room's use ends (epoch ms: a session's limit), so per-peer TURN credentials expire
   * with it; null: they last the TURN TTL.
   */
  readonly mediaUntilMs?: number | null;
}

interface Subscriber {
  readonly participantId: string;
  /** Which token admitted it: a second join with the same token replaces the first. */
  readonly grantId: string;
  readonly channel: ParticipantChannel;
  peer: SubscriberPeer | null;
}

/** A joined participant, as handed to the signalling connection. */
export interface RoomParticipant {
  readonly participantId: string;
  handle(message: SignallingClientMessage): Promise<void>;
  leave(): void;
}

const GATHERING_FAILURES: Record<PeerGatheringFailure, string> = {
  media_ports_exhausted: 'the server has no free media port for this connection (SVC_RTC_PORT_MIN..MAX all in use)',
  turn_unavailable: 'the server could not get a relay from its TURN server (unreachable, or it refused the credential)',
  no_candidates: 'the server found no network address to offer for this connection',
};

export class Room {
  private publication: RoomPublication | null = null;
  /**
   * Who may send app messages: the current publication, or the last one after its media ended,
   * until another publishes. A bot's last messages (`session-ended` after a farewell) must not
   * depend on whether its frames ran out before it sent them.
   */
  private messenger: RoomPublication | null = null;
  private readonly members = new Map<string, Subscriber>();
  /** Each token's join budget (ROOM_JOIN_LIMITS): joins left, as of `atMs`. */
  private readonly joinBudgets = new Map<string, { left: number; atMs: number }>();
  private closedReason: string | null = null;
  private emptyAtMs: number | null;
  private readonly audio = new Subject<ParticipantAudio>();
  private readonly fromClients = new Subject<RoomClientMessage>();
  private readonly presence = new Subject<RoomSubscriberEvent>();
  readonly createdAt = new Date();

  /**
   * Messages subscribers send to the bot (`client_message`), in the order each sent them (hot;
   * completes when the room closes). Checked as JSON objects within the size limit; what they
   * mean is the bot's business (the session protocol).
   */
  get clientMessages(): Observable<RoomClientMessage> {
    return this.fromClients.asObservable();
  }

  /** Subscribers joining, their peer connections changing state, leaving (hot; completes on close). */
  get subscriberEvents(): Observable<RoomSubscriberEvent> {
    return this.presence.asObservable();
  }

  /** The subscribers in the room now (take this, then follow `subscriberEvents`). */
  subscribers(): RoomSubscriberInfo[] {
    return [...this.members.values()].map((s) => ({ participantId: s.participantId, peerState: s.peer?.connectionState ?? 'none' }));
  }

  /**
   * Microphone audio of subscribers that send it (hot; completes when the room closes). The bot
   * listens here for the user's speech when the browser talks over the room.
   */
  get participantAudio(): Observable<ParticipantAudio> {
    return this.audio.asObservable();
  }

  constructor(
    readonly name: string,
    private readonly options: RoomOptions,
  ) {
    this.emptyAtMs = options.now();
  }

  /** Since when (clock ms) the room has had no publisher and no subscriber; null while in use. */
  get emptySinceMs(): number | null {
    return this.emptyAtMs;
  }

  private touch(): void {
    this.emptyAtMs = this.publication || this.members.size > 0 ? null : (this.emptyAtMs ?? this.options.now());
  }

  get closed(): boolean {
    return this.closedReason !== null;
  }

  get subscriberCount(): number {
    return this.members.size;
  }

  get publisherId(): string | null {
    return this.publication?.participantId ?? null;
  }

  /** Server-side peer connection states, by subscriber (for tests and diagnostics). */
  peerStates(): Record<string, RTCPeerConnectionState | 'none'> {
    const states: Record<string, RTCPeerConnectionState | 'none'> = {};
    for (const s of this.members.values()) states[s.participantId] = s.peer?.connectionState ?? 'none';
    return states;
  }

  publish(publication: RoomPublication): void {
    if (this.closedReason !== null) throw new RoomError('room_closed', `room ${this.name} is closed`);
    if (this.publication) throw new RoomError('already_publishing', `room ${this.name} already has a publisher (${this.publication.participantId})`);
    this.publication = publication;
    this.messenger = publication;
    this.touch();
    for (const s of this.members.values()) this.connect(s);
  }

  /**
   * Sends a bot message to every subscriber over its signalling connection (ordered, reliable).
   * Only the room's publisher may: the current one, or the last one after its media ended (until
   * another publishes or the room closes); returns how many subscribers it reached.
   */
  sendAppMessage(publication: RoomPublication, message: Readonly<Record<string, unknown>>): number {
    if (this.messenger !== publication) return 0;
    for (const s of this.members.values()) s.channel.send({ type: 'app_message', publisher_id: publication.participantId, message });
    return this.members.size;
  }

  unpublish(publication: RoomPublication): void {
    if (this.publication !== publication) return;
    this.publication = null;
    this.touch();
    for (const s of this.members.values()) {
      const pcId = s.peer?.pcId ?? null;
      s.peer?.close();
      s.peer = null;
      s.channel.send({ type: 'unpublished', pc_id: pcId, publisher_id: publication.participantId });
      if (pcId !== null) this.presence.next({ type: 'peer-state', participantId: s.participantId, state: 'none' });
    }
  }

  /** Takes one join from the token's budget, or refuses it (`rate_limited`, fatal: the connection ends). */
  private spendJoin(grantId: string): void {
    const { burst, refillMs } = ROOM_JOIN_LIMITS;
    const now = this.options.now();
    const budget = this.joinBudgets.get(grantId) ?? { left: burst, atMs: now };
    const refilled = Math.min(burst, budget.left + Math.max(0, now - budget.atMs) / refillMs);
    if (refilled < 1) {
      const waitS = Math.ceil(((1 - refilled) * refillMs) / 1000);
      throw new SignallingError('rate_limited', `this token joined the room ${burst} times in quick succession; join again in ${waitS} s`, true);
    }
    this.joinBudgets.set(grantId, { left: refilled - 1, atMs: now });
  }

  join(grantId: string, channel: ParticipantChannel): RoomParticipant {
    if (this.closedReason !== null) throw new SignallingError('room_closed', `room ${this.name} is closed`, true);
    this.spendJoin(grantId);
    for (const other of this.members.values()) {
      if (other.grantId !== grantId) continue;
      this.remove(other.participantId, 'replaced');
      other.channel.send({ type: 'error', code: 'replaced', message: 'the same token joined the room from another connection', fatal: true });
      other.channel.close('replaced', 'replaced by a newer connection');
    }
    if (this.members.size >= this.options.maxSubscribers) {
      throw new SignallingError('room_full', `room ${this.name} already has ${this.options.maxSubscribers} subscribers`, true);
    }
    const subscriber: Subscriber = { participantId: `sub_${randomUUID()}`, grantId, channel, peer: null };
    this.members.set(subscriber.participantId, subscriber);
    this.touch();
    this.presence.next({ type: 'joined', participantId: subscriber.participantId });
    const pub = this.publication;
    const network = this.options.network ?? RTC_NETWORK_DEFAULTS;
    channel.send({
      type: 'joined',
      room: this.name,
      participant_id: subscriber.participantId,
      publisher: pub ? { participant_id: pub.participantId, tracks: pub.tracks } : null,
      protocol_version: SIGNALLING_PROTOCOL_VERSION,
      // The visitor's own STUN/TURN servers: a TURN credential minted for this join only.
      ice_servers: iceServersFor(network, this.options.mediaUntilMs ?? null, Date.now(), subscriber.participantId),
      ice_transport_policy: network.iceTransportPolicy,
    });
    if (pub) this.connect(subscriber);
    return {
      participantId: subscriber.participantId,
      handle: (message) => this.handle(subscriber, message),
      leave: () => this.remove(subscriber.participantId, 'disconnected'),
    };
  }

  /** Ends the room: subscribers are told and disconnected, the publication stops. */
  close(reason = 'room closed'): void {
    if (this.closedReason !== null) return;
    this.closedReason = reason;
    const pub = this.publication;
    this.publication = null;
    this.messenger = null;
    for (const s of [...this.members.values()]) {
      this.remove(s.participantId, 'room closed');
      s.channel.send({ type: 'closed', reason });
      s.channel.close('room_closed', reason);
    }
    pub?.onRoomClosed(reason);
    this.audio.complete();
    this.fromClients.complete();
    this.presence.complete();
  }

  private async handle(subscriber: Subscriber, message: SignallingClientMessage): Promise<void> {
    switch (message.type) {
      case 'join':
        throw new SignallingError('already_joined', 'this connection already joined the room');
      case 'answer':
        await this.peerFor(subscriber, message.pc_id).acceptAnswer(message.sdp);
        return;
      case 'candidate':
        await this.peerFor(subscriber, message.pc_id).addCandidate(message.candidate);
        return;
      case 'restart_ice':
        await this.peerFor(subscriber, message.pc_id).restartIce();
        return;
      case 'ping':
        subscriber.channel.send({ type: 'pong', t: message.t ?? Date.now() });
        return;
      case 'client_message':
        if (this.members.get(subscriber.participantId) === subscriber) this.fromClients.next({ participantId: subscriber.participantId, message: message.message });
        return;
      case 'leave':
        this.remove(subscriber.participantId, 'left');
        subscriber.channel.send({ type: 'closed', reason: 'left' });
        subscriber.channel.close('normal', 'left');
        return;
    }
  }

  private peerFor(subscriber: Subscriber, pcId: string): SubscriberPeer {
    const peer = subscriber.peer;
    if (!peer || peer.pcId !== pcId) throw new SignallingError('unknown_peer', `no peer connection ${pcId.slice(0, 64)} for this participant (it may have been unpublished)`);
    return peer;
  }

  private connect(subscriber: Subscriber): void {
    const pub = this.publication;
    if (!pub || subscriber.peer) return;
    const network = this.options.network ?? RTC_NETWORK_DEFAULTS;
    let peer: SubscriberPeer;
    try {
      peer = this.createPeer(subscriber, pub, network);
    } catch (error) {
      // Never thrown out of join() or publish(): the member was added (or the publication set)
      // before, and the caller, seeing a throw, would hold no handle to remove it with. This
      // visitor gets no peer and is told; the others and the room go on.
      subscriber.channel.send({ type: 'error', code: 'internal_error', message: `could not set up the media connection: ${errorMessage(error)}`, fatal: false });
      return;
    }
    subscriber.peer = peer;
    peer.start().catch((error: unknown) => {
      if (subscriber.peer !== peer) return;
      peer.close();
      subscriber.peer = null;
      subscriber.channel.send({ type: 'error', code: 'internal_error', message: `could not create an offer: ${errorMessage(error)}`, fatal: false });
    });
  }

  private createPeer(subscriber: Subscriber, pub: RoomPublication, network: RtcNetworkSettings): SubscriberPeer {
    const peer: SubscriberPeer = new SubscriberPeer(
      pub.createTracks(),
      (m) => subscriber.channel.send(m),
      pub.participantId,
      // The server's own TURN credential, minted for this peer connection.
      { ...this.options, iceServers: [...(this.options.iceServers ?? []), ...iceServersFor(network, this.options.mediaUntilMs ?? null)] },
      (audio) => {
        if (this.audio.observed) this.audio.next({ ...audio, participantId: subscriber.participantId });
      },
      (state) => {
        if (subscriber.peer === peer) this.presence.next({ type: 'peer-state', participantId: subscriber.participantId, state });
      },
      (failure) => {
        if (subscriber.peer !== peer) return;
        // Nothing to connect with: the visitor is told at once (it would otherwise wait for its
        // timeout), and the bot sees the failure with its reason.
        subscriber.channel.send({ type: 'error', code: 'ice_unavailable', message: GATHERING_FAILURES[failure], fatal: false });
        this.presence.next({ type: 'peer-state', participantId: subscriber.participantId, state: 'failed', reason: failure });
      },
    );
    return peer;
  }

  private remove(participantId: string, reason: string): void {
    const s = this.members.get(participantId);
    if (!s) return;
    this.members.delete(participantId);
    s.peer?.close();
    s.peer = null;
    this.touch();
    this.presence.next({ type: 'left', participantId, reason });
  }
}
