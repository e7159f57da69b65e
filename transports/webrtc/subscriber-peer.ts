/**
 * The server side of one subscriber's peer connection (libwebrtc through wrtc): it carries the
 * avatar's tracks to one browser. The server offers, the browser answers; candidates trickle
 * both ways. With no STUN/TURN configured only host candidates exist: the browser reaches the
 * server's addresses directly, and the server learns the browser's address from its checks. Across
 * NATs the room's network settings (rtc-network.ts) add TURN servers, an announced address, a
 * port range and the relay policy; the browser may ask for an ICE restart when its network changes.
 */
import { preferShortAudioPackets } from './sdp.ts';
import { randomUUID } from 'node:crypto';
import type { IceCandidateWire, SignallingServerMessage } from '../../protocol/room-signalling.ts';
import { SignallingError } from '../../protocol/room-signalling.ts';
import { wrtcWithSources } from './wrtc.ts';
import { RemoteCandidateScreen, type RemoteCandidateScreenOptions } from './remote-candidates.ts';
import { announceCandidate, announceInSdp, RTC_NETWORK_DEFAULTS, serverPeerConfiguration, type RtcNetworkSettings } from './rtc-network.ts';

/** 10 ms of the subscriber's microphone as libwebrtc hands it over (16 kHz mono with @roamhq/wrtc 0.10). */
export interface SubscriberAudio {
  readonly samples: Int16Array;
  readonly sampleRate: number;
  readonly channels: number;
}

export interface SubscriberPeerOptions {
  /** ICE servers for the server's peer connections. Default none: host candidates only. */
  readonly iceServers?: readonly RTCIceServer[];
  /** Which remote candidates reach libwebrtc (address policy, limit): remote-candidates.ts. */
  readonly remoteCandidates?: RemoteCandidateScreenOptions;
  /** Announced address, port range, relay policy (rtc-network.ts); `iceServers` above are this peer's own. */
  readonly network?: RtcNetworkSettings;
}

/**
 * Why a peer connection can never connect, found when its candidate gathering ended without one
 * usable (UDP) candidate: every port of `SVC_RTC_PORT_MIN..MAX` is taken, or (relay policy) the
 * TURN server gave no allocation (unreachable, or it refused the credential).
 */
export type PeerGatheringFailure = 'media_ports_exhausted' | 'turn_unavailable' | 'no_candidates';

export const SUBSCRIBER_PEER_DEFAULTS = {
  /** A visitor's ICE restart requests closer together than this are ignored (one restart at a time). */
  minRestartIntervalMs: 1_000,
} as const;

type AudioSink = InstanceType<ReturnType<typeof wrtcWithSources>['nonstandard']['RTCAudioSink']>;

export class SubscriberPeer {
  readonly pcId = `pc_${randomUUID()}`;
  private readonly pc: RTCPeerConnection;
  private readonly pendingCandidates: IceCandidateWire[] = [];
  /** Applies to candidates before and after the answer alike: the queue is bounded by it too. */
  private readonly screen: RemoteCandidateScreen;
  private readonly audioSinks: AudioSink[] = [];
  private answered = false;
  private closed = false;
  private readonly network: RtcNetworkSettings;
  /** Host candidates already announced (address + port), so two interfaces do not announce one twice. */
  private readonly announced = new Set<string>();
  private udpCandidates = 0;
  private lastRestartAt = 0;
  /** Candidates gathered while an offer is being made (sent after it; null: none is being made). */
  private heldCandidates: SignallingServerMessage[] | null = null;
  /** The restart offer waits for this (a restart asked for while the first offer is still out). */
  private negotiating: Promise<void> = Promise.resolve();
  /** How many ICE restarts the visitor asked for and got (diagnostics). */
  restarts = 0;

  /**
   * @param onAudio receives the subscriber's microphone when its answer sends audio back on the
   *   avatar's audio transceiver (the browser client's `microphone` option).
   * @param onState receives every change of the peer connection's state (`connected`, `failed`, ...).
   */
  constructor(
    private readonly tracks: readonly MediaStreamTrack[],
    private readonly send: (message: SignallingServerMessage) => void,
    private readonly publisherId: string,
    options: SubscriberPeerOptions = {},
    onAudio?: (audio: SubscriberAudio) => void,
    onState?: (state: RTCPeerConnectionState) => void,
    onGatheringFailed?: (failure: PeerGatheringFailure) => void,
  ) {
    this.screen = new RemoteCandidateScreen(options.remoteCandidates);
    this.network = options.network ?? RTC_NETWORK_DEFAULTS;
    const wrtc = wrtcWithSources();
    const { RTCPeerConnection, MediaStream } = wrtc;
    this.pc = new RTCPeerConnection(serverPeerConfiguration(this.network, options.iceServers ?? []));
    const stream = new MediaStream();
    for (const track of tracks) {
      stream.addTrack(track);
      this.pc.addTrack(track, stream);
    }
    this.pc.ontrack = (event) => {
      if (this.closed || !onAudio || event.track.kind !== 'audio') return;
      const sink = new wrtc.nonstandard.RTCAudioSink(event.track);
      sink.ondata = (data: { samples: Int16Array; sampleRate: number; channelCount?: number }) => {
        if (!this.closed) onAudio({ samples: data.samples, sampleRate: data.sampleRate, channels: data.channelCount ?? 1 });
      };
      this.audioSinks.push(sink);
    };
    this.pc.onconnectionstatechange = () => {
      if (!this.closed) onState?.(this.pc.connectionState);
    };
    this.pc.onicecandidate = (event) => {
      if (this.closed) return;
      const c = event.candidate;
      if (!c) {
        this.sendCandidate({ type: 'candidate', pc_id: this.pcId, candidate: null });
        if (this.udpCandidates === 0) onGatheringFailed?.(this.gatheringFailure());
        return;
      }
      if (/ udp /i.test(c.candidate)) this.udpCandidates++;
      const candidate = announceCandidate(c.candidate, this.network.announcedAddress, this.announced);
      if (candidate === null) return;
      this.sendCandidate({ type: 'candidate', pc_id: this.pcId, candidate: { candidate, sdpMid: c.sdpMid, sdpMLineIndex: c.sdpMLineIndex, usernameFragment: c.usernameFragment ?? null } });
    };
  }

  get connectionState(): RTCPeerConnectionState {
    return this.pc.connectionState;
  }

  private gatheringFailure(): PeerGatheringFailure {
    if (this.network.iceTransportPolicy === 'relay') return 'turn_unavailable';
    return this.network.portRange ? 'media_ports_exhausted' : 'no_candidates';
  }

  /** Creates and sends the offer. */
  start(): Promise<void> {
    const started = this.offer(false);
    this.negotiating = started.catch(() => undefined);
    return started;
  }

  /** A candidate, or the end of them: held while an offer is being made, sent at once otherwise. */
  private sendCandidate(message: SignallingServerMessage): void {
    if (this.heldCandidates) this.heldCandidates.push(message);
    else this.send(message);
  }

  /**
   * Makes and sends an offer. The offer goes out as created, its candidates after it: gathering
   * starts with setLocalDescription, and candidates found before the offer is sent are held and
   * sent right after it (a client drops candidates for an offer it has not seen). The local
   * description is never read back: wrtc serialises it on the JavaScript thread while libwebrtc's
   * signalling thread adds the candidates being gathered to it, and a test run crashed there
   * (SIGSEGV in webrtc::SdpSerialize from RTCPeerConnection::GetLocalDescription, local CI run N).
   */
  private async offer(iceRestart: boolean): Promise<void> {
    this.heldCandidates ??= [];
    try {
      const created = await this.pc.createOffer(iceRestart ? { iceRestart: true } : {});
      if (this.closed) return;
      // 10 ms Opus packets from the visitor (see sdp.ts): the offer's a=ptime shapes what they send.
      const offer = { type: 'offer' as const, sdp: preferShortAudioPackets(created.sdp ?? '') };
      await this.pc.setLocalDescription(offer);
      if (this.closed) return;
      this.answered = false;
      this.send({ type: 'offer', pc_id: this.pcId, publisher_id: this.publisherId, sdp: announceInSdp(offer.sdp, this.network.announcedAddress) });
    } finally {
      const held = this.heldCandidates ?? [];
      this.heldCandidates = null;
      if (!this.closed) for (const message of held) this.send(message);
    }
  }

  /**
   * The visitor's network changed (its side went `disconnected`/`failed`): a new offer with fresh
   * ICE credentials on the same peer connection; the tracks and the call go on. Requests while one
   * is answered, or closer together than `minRestartIntervalMs`, are ignored (the visitor asks again).
   */
  async restartIce(): Promise<boolean> {
    if (this.closed) return false;
    const now = Date.now();
    if (now - this.lastRestartAt < SUBSCRIBER_PEER_DEFAULTS.minRestartIntervalMs) return false;
    await this.negotiating;
    if (this.closed || !this.answered || this.pc.signalingState !== 'stable') return false;
    this.lastRestartAt = now;
    this.restarts++;
    const restarted = this.offer(true);
    this.negotiating = restarted.catch(() => undefined);
    await restarted;
    return true;
  }

  async acceptAnswer(sdp: string): Promise<void> {
    if (this.closed) return;
    if (this.answered || this.pc.signalingState !== 'have-local-offer') throw new SignallingError('negotiation_failed', 'this peer connection already has an answer');
    try {
      // ... and from us: our encoder follows the a=ptime of the answer it applies.
      await this.pc.setRemoteDescription({ type: 'answer', sdp: preferShortAudioPackets(sdp) });
    } catch (error) {
      throw new SignallingError('negotiation_failed', `the answer was refused: ${error instanceof Error ? error.message : String(error)}`);
    }
    this.answered = true;
    for (const c of this.pendingCandidates.splice(0)) await this.applyCandidate(c);
  }

  async addCandidate(candidate: IceCandidateWire | null): Promise<void> {
    if (this.closed || candidate === null || candidate.candidate === '') return; // end of candidates
    // Refused candidates are dropped without a reply: a reply per candidate would hand a flood
    // back to its sender, and a visitor whose candidates are refused still connects (see the screen).
    if (!this.screen.admit(candidate).admitted) return;
    if (!this.answered) {
      this.pendingCandidates.push(candidate);
      return;
    }
    await this.applyCandidate(candidate);
  }

  private async applyCandidate(candidate: IceCandidateWire): Promise<void> {
    try {
      await this.pc.addIceCandidate({ candidate: candidate.candidate, sdpMid: candidate.sdpMid, sdpMLineIndex: candidate.sdpMLineIndex });
    } catch {
      // Browsers hide host addresses behind mDNS names that libwebrtc here cannot resolve; such a
      // candidate is useless but harmless, the browser's checks still reach our own candidates.
    }
  }

  /** Stops this subscriber's tracks and closes the connection (the browser's tracks end). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.pc.onicecandidate = null;
    this.pc.ontrack = null;
    this.pc.onconnectionstatechange = null;
    for (const sink of this.audioSinks) sink.stop();
    for (const track of this.tracks) track.stop();
    this.pc.close();
  }
}
