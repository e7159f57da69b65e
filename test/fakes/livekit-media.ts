/**
 * The media plane of the fake LiveKit server (livekit-server.ts): peer connections through werift
 * (WebRTC in TypeScript: ICE, DTLS, SRTP, SCTP) and packet forwarding, as an SFU does.
 *
 * Before, the fake answered with libwebrtc (@roamhq/wrtc): it decoded every received track and
 * re-encoded it for each subscriber, about a quarter of a core per forwarded 360p avatar on this
 * 2-core machine, taken from the very bots and browsers the tests time (bench: livekit-sfu).
 * LiveKit itself (pion, Go) never decodes: a DownTrack writes each received RTP packet to the
 * subscriber with its own SSRC and payload type, sequence numbers and timestamps shifted by a
 * fixed offset, padding-only packets dropped, and a new DownTrack asks the publisher for a key
 * frame (PLI, again every 500 ms until one comes) and starts on it; subscribers' PLIs go back to
 * the publisher. Audio levels come from the RTP header (RFC 6464 ssrc-audio-level), which is how
 * LiveKit detects speakers. This module does the same, with one codec per kind (Opus, VP8: what
 * the SDKs publish by default) and no RTX. Of a simulcast publication (rids q, h, f: quarter, half
 * and full size) one layer is read and forwarded, the largest, as LiveKit sends a subscriber that
 * shows the video at full size.
 *
 * What the fake knows of received media therefore comes from packets, not pictures: frames are
 * counted by the RTP marker bit (the last packet of a frame), the picture size is read from each
 * VP8 key frame's header, and an audio packet is audible when its level reaches `audibleDbov`.
 */
import {
  MediaStream,
  RTCPeerConnection,
  RtpHeader,
  RtpPacket,
  UdpTransport,
  useAudioLevelIndication,
  useNACK,
  useOPUS,
  usePLI,
  useSdesMid,
  useSdesRTPStreamId,
  useVP8,
  type MediaStreamTrack,
  type RTCRtpReceiver,
  type RTCRtpTransceiver,
} from 'werift';

export const LIVEKIT_MEDIA_FAKE_DEFAULTS = {
  /** An audio packet counts as audible when its RFC 6464 level is at most this many dB below full scale. */
  audibleDbov: 50,
  /** A DownTrack without a key frame asks the publisher again this often (LiveKit: 500 ms). */
  keyFrameRequestIntervalMs: 500,
  /** A received DTLS datagram this large or larger is bulk data (a full SCTP DATA packet is about 1,200 bytes), handled after media (`prioritizeMedia`). */
  bulkDatagramBytes: 1000,
  /** A connection that sent bulk data within this long has its DTLS datagrams (the SACKs for it) wait too (`prioritizeMedia`). */
  bulkQuietMs: 100,
} as const;

const AUDIO_LEVEL_URI = 'urn:ietf:params:rtp-hdrext:ssrc-audio-level';

/** What arrived on a participant's published tracks, read from the RTP packets. */
export interface FakeReceivedMedia {
  /** Complete video frames (packets carrying the marker bit) and key frames. */
  videoFrames: number;
  videoKeyFrames: number;
  /** The picture size of the last VP8 key frame. */
  videoWidth: number;
  videoHeight: number;
  /** Audio packets (Opus, 20 ms each as the SDKs send them) and those at least `audibleDbov` loud. */
  audioPackets: number;
  audiblePackets: number;
  /** The loudest RFC 6464 level seen, in -dBov (0 is full scale, 127 digital silence). */
  loudestDbov: number;
}

export function emptyReceivedMedia(): FakeReceivedMedia {
  return { videoFrames: 0, videoKeyFrames: 0, videoWidth: 0, videoHeight: 0, audioPackets: 0, audiblePackets: 0, loudestDbov: 127 };
}

/**
 * Media before data, as a LiveKit server has it: there each participant's transport runs on
 * goroutines of its own over every core, so a data burst on one connection does not hold up the
 * media of another. Here every connection shares one JS event loop, and each datagram runs to
 * completion: an agent's TTS segment written at once (125 kB, about a hundred SCTP packets in,
 * as many relayed out to the avatar worker) kept the loop busy in blocks of 10-30 ms, the
 * forwarded audio came out with that much jitter, and the visitor's jitter buffer grew for it
 * (its jitterBufferTargetDelay from 20 to 60 ms, which every clear_buffer then waited through;
 * docs/livekit-agents.md, "Media before data").
 *
 * So a connection's bulk data waits: a DTLS datagram (content types 20-63, RFC 7983: the handshake
 * and the SCTP under the data channels) of at least `bulkDatagramBytes` (a full SCTP DATA packet);
 * every DTLS datagram of a connection that sent such a datagram within `bulkQuietMs` (the SACKs for
 * a relayed burst: werift's SCTP sends the next window of it as it reads each one, so handled at
 * once they brought the blocks back); and every DTLS datagram of a connection that has some waiting
 * (its order kept). They go into one FIFO queue worked through one datagram per turn of the event
 * loop, so that the sockets are read again between any two of them. STUN, SRTP/SRTCP (media) and
 * the small DTLS datagrams of a quiet connection (SACKs, short messages) are handled as they come,
 * as before.
 *
 * One datagram per turn, not a batch: werift relies on the microtasks that run between two
 * datagrams (the end of a DTLS handshake starts the SCTP association in one; the peer's SCTP INIT
 * handled in the same batch before it was lost, and a bot's data channel never opened). Only bulk
 * waits: control traffic (SACKs, the handshake, short messages) keeps the timing it had.
 */
const dataQueue: (() => void)[] = [];
function scheduleData(work: () => void): void {
  dataQueue.push(work);
  if (dataQueue.length === 1) setImmediate(nextData);
}
function nextData(): void {
  try {
    dataQueue[0]!();
  } catch {
    // werift handles its own errors per datagram; one that escapes drops that datagram only
  } finally {
    dataQueue.shift();
    if (dataQueue.length > 0) setImmediate(nextData);
  }
}

/** A DTLS record (RFC 7983: first byte 20-63): the handshake, or SCTP under the data channels. */
const isDtls = (data: Buffer): boolean => (data[0] ?? 0) >= 20 && (data[0] ?? 0) <= 63;

let prioritized = false;
/** Installs the media-before-data order on werift's UDP sockets (once per process, before the first connection). */
export function prioritizeMedia(): void {
  if (prioritized) return;
  prioritized = true;
  const init = UdpTransport.init.bind(UdpTransport);
  UdpTransport.init = async (...args: Parameters<typeof UdpTransport.init>) => {
    const transport = await init(...args);
    let handler: UdpTransport['onData'] = transport.onData;
    // This connection's DTLS datagrams in the queue: while there are some, its later ones queue too.
    let waiting = 0;
    // When it last sent bulk data: the acknowledgements that come back for it release more
    // (werift's SCTP sends what its window allows as it reads each SACK), so they wait too.
    let bulkSentAt = -Infinity;
    const send = transport.send;
    transport.send = (data: Buffer, addr?: Parameters<UdpTransport['send']>[1]) => {
      if (isDtls(data) && data.length >= LIVEKIT_MEDIA_FAKE_DEFAULTS.bulkDatagramBytes) bulkSentAt = performance.now();
      return send(data, addr);
    };
    // werift sets its receiver on the transport after init: wrapped as it is set.
    Object.defineProperty(transport, 'onData', {
      configurable: true,
      get: () => handler,
      set: (receive: UdpTransport['onData']) => {
        handler = (data: Buffer, addr: Parameters<UdpTransport['onData']>[1]) => {
          const bulk = data.length >= LIVEKIT_MEDIA_FAKE_DEFAULTS.bulkDatagramBytes || performance.now() - bulkSentAt < LIVEKIT_MEDIA_FAKE_DEFAULTS.bulkQuietMs;
          if (!isDtls(data) || (waiting === 0 && !bulk)) return receive(data, addr);
          waiting++;
          scheduleData(() => {
            waiting--;
            receive(data, addr);
          });
        };
      },
    });
    return transport;
  };
}

/** A DATA chunk as werift's SCTP keeps it in a stream's reassembly buffer. */
interface ReassemblyChunk {
  flags: number;
  tsn: number;
  streamId: number;
  streamSeqNum: number;
  protocol: number;
  userData: Buffer;
}
/** werift's InboundStream (one per SCTP stream), as far as `popMessages` uses it. */
interface InboundStream {
  reassembly: ReassemblyChunk[];
  streamSequenceNumber: number;
}
const DATA_LAST_FRAGMENT = 0x01;
const DATA_FIRST_FRAGMENT = 0x02;
const DATA_UNORDERED = 0x04;
/** Serial number arithmetic (RFC 1982) on the 16-bit stream sequence number. */
const ssnAfter = (a: number, b: number): boolean => (a > b && a - b < 0x8000) || (a < b && b - a > 0x8000);

/**
 * The complete messages at the head of a stream's reassembly buffer, removed and yielded in order
 * ([stream id, payload protocol, data]): ordered ones in sequence, from the next expected one;
 * unordered ones whenever complete. What werift's own `InboundStream.popMessages` is meant to do:
 * werift 0.24.4 yields at most one message per call when the next one's chunks do not follow the
 * last one's TSN (as when two streams interleave: the reliable and the lossy channel), and is called
 * again only when a chunk arrives on that stream, so a complete message could stay in the buffer
 * for good (werift-webrtc issue 706; test/webrtc/livekit-sctp-reassembly.test.ts shows it).
 */
export function* popCompleteMessages(this: InboundStream): Generator<[number, number, Buffer]> {
  let pos = 0;
  let start: number | undefined;
  let expectedTsn = 0;
  let ordered = true;
  while (pos < this.reassembly.length) {
    const chunk = this.reassembly[pos]!;
    if (start === undefined) {
      ordered = (chunk.flags & DATA_UNORDERED) === 0;
      if ((chunk.flags & DATA_FIRST_FRAGMENT) === 0 || (ordered && ssnAfter(chunk.streamSeqNum, this.streamSequenceNumber))) {
        // Not a message's start, or an ordered message not yet due: ordered delivery stops here.
        if (ordered) return;
        pos++;
        continue;
      }
      start = pos;
      expectedTsn = chunk.tsn;
    } else if (chunk.tsn !== expectedTsn) {
      // A gap inside the message: ordered delivery waits for it; an unordered message is skipped
      // and this chunk looked at again as a start.
      if (ordered) return;
      start = undefined;
      continue;
    }
    if ((chunk.flags & DATA_LAST_FRAGMENT) !== 0) {
      const parts = this.reassembly.splice(start, pos - start + 1);
      if (ordered && chunk.streamSeqNum === this.streamSequenceNumber) this.streamSequenceNumber = (this.streamSequenceNumber + 1) & 0xffff;
      pos = start;
      start = undefined;
      yield [chunk.streamId, chunk.protocol, Buffer.concat(parts.map((c) => c.userData))];
      continue;
    }
    pos++;
    expectedTsn = (expectedTsn + 1) % 0x1_0000_0000;
  }
}

/**
 * A new werift InboundStream, not part of any connection. The class is not exported: it is reached
 * through a probe peer connection's SCTP (`getInboundStream` called on a stand-in object, so no
 * connection's own streams are touched). The probe is never negotiated, so it gathers nothing;
 * ICE lite without servers all the same (see `sfuPeerConnection`).
 */
export function newInboundStream(): object {
  const pc = new RTCPeerConnection({ iceServers: [], iceLite: true });
  try {
    pc.createDataChannel('probe');
    const sctp = (pc as unknown as { sctpTransport?: { sctp?: { getInboundStream(id: number): object } } }).sctpTransport?.sctp;
    if (!sctp) throw new Error('werift changed: no SCTP behind a data channel');
    return sctp.getInboundStream.call({ inboundStreams: {} }, 0);
  } finally {
    void pc.close();
  }
}

let sctpMended = false;
/** Puts `popCompleteMessages` in the place of werift's `InboundStream.popMessages` (once per process). */
export function mendSctpReassembly(): void {
  if (sctpMended) return;
  sctpMended = true;
  const prototype = Object.getPrototypeOf(newInboundStream()) as { popMessages?: unknown };
  if (typeof prototype.popMessages !== 'function') throw new Error('werift changed: InboundStream has no popMessages');
  prototype.popMessages = popCompleteMessages;
}

/**
 * A peer connection of the SFU: Opus and VP8 only (with NACK and PLI), the mid, rid and audio
 * level extensions, one bundled transport, ICE on the one address `address` (see `onlyAddress`).
 */
export function sfuPeerConnection(address: string): RTCPeerConnection {
  prioritizeMedia();
  mendSctpReassembly();
  return new RTCPeerConnection({
    iceServers: [],
    // ICE lite (host candidates only, the controlled side), as servers such as mediasoup and Janus
    // run it: werift's full ICE falls back to a public STUN server when given none, and tests
    // never leave this machine.
    iceLite: true,
    iceUseIpv6: false,
    // Every socket bound to `address`, and that address a candidate even when it is loopback or
    // on a veth (which werift leaves out of its host addresses).
    iceInterfaceAddresses: { udp4: address },
    iceAdditionalHostAddresses: [address],
    bundlePolicy: 'max-bundle',
    codecs: {
      audio: [useOPUS()],
      // No transport-wide congestion control: with werift's TWCC feedback libwebrtc publishers
      // soon estimated too little bandwidth and paused their full-size simulcast layer (observed:
      // frames at the fake stopped after 3 s while the visitor's quarter layer went on). Without
      // it they fall back to loss-based estimation from receiver reports, and loopback loses nothing.
      video: [useVP8({ rtcpFeedback: [useNACK(), usePLI()] })],
    },
    headerExtensions: {
      audio: [useSdesMid(), useAudioLevelIndication()],
      // rtp-stream-id: simulcast layers are told apart by their rid (the SDKs' q, h and f).
      video: [useSdesMid(), useSdesRTPStreamId()],
    },
  });
}

/**
 * werift binds every host candidate's socket to `iceInterfaceAddresses` but still advertises a
 * candidate per interface of the machine: a check sent to one of those is answered from the bound
 * address, which libwebrtc does not take as the answer, while werift's ICE lite keeps the
 * USE-CANDIDATE of that check as its nomination, and DTLS never completes (seen whenever a second
 * IPv4 interface existed, such as another test's veth). Only the candidates of `address` are
 * given out, in descriptions and in trickles.
 */
export function onlyAddress(sdp: string, address: string): string {
  return sdp
    .split('\r\n')
    .filter((line) => !line.startsWith('a=candidate:') || candidateAddress(line) === address)
    .join('\r\n');
}

/** The connection address of a candidate line (`a=candidate:...` or the bare `candidate:...`). */
export function candidateAddress(candidate: string): string | undefined {
  return candidate.replace(/^a=/, '').split(' ')[4];
}

/**
 * werift writes port 0 in an inactive m-section, which RFC 8829 (JSEP) reserves for a rejected
 * one: libwebrtc then drops the section and, when it is the BUNDLE tag (the SDKs' publisher offers
 * start with recvonly sections nobody sends on), the whole bundled transport, and never connects.
 * An inactive section keeps the discard port 9, as libwebrtc writes it.
 */
export function inactiveNotRejected(sdp: string): string {
  return sdp
    .split(/(?=^m=)/m)
    .map((section) => (/^a=inactive$/m.test(section) ? section.replace(/^m=(audio|video) 0 /, 'm=$1 9 ') : section))
    .join('');
}

/**
 * The VP8 payload descriptor (RFC 7741 4.2) of a packet: whether it starts a frame, and for the
 * first packet of a key frame the picture size from the key frame header (RFC 6386 9.1).
 */
export function vp8FrameStart(payload: Buffer): { keyFrame: boolean; width: number; height: number } | undefined {
  if (payload.length < 1) return undefined;
  const b0 = payload[0]!;
  const start = (b0 & 0x10) !== 0 && (b0 & 0x07) === 0;
  if (!start) return undefined;
  let i = 1;
  if (b0 & 0x80) {
    const x = payload[i++] ?? 0;
    if (x & 0x80) i += (payload[i]! & 0x80) ? 2 : 1; // picture id, 7 or 15 bits
    if (x & 0x40) i += 1; // TL0PICIDX
    if (x & 0x30) i += 1; // TID / KEYIDX
  }
  if (payload.length < i + 10) return { keyFrame: false, width: 0, height: 0 };
  const keyFrame = (payload[i]! & 0x01) === 0;
  if (!keyFrame || payload[i + 3] !== 0x9d || payload[i + 4] !== 0x01 || payload[i + 5] !== 0x2a) return { keyFrame: false, width: 0, height: 0 };
  return { keyFrame: true, width: payload.readUInt16LE(i + 6) & 0x3fff, height: payload.readUInt16LE(i + 8) & 0x3fff };
}

/** The received track to read and forward: of simulcast layers, the largest (f, else h, else q). */
export function largestLayer(receiver: RTCRtpReceiver): MediaStreamTrack {
  for (const rid of ['f', 'h', 'q']) {
    const layer = receiver.trackByRID[rid];
    if (layer) return layer;
  }
  return receiver.track;
}

/** One published track as the SFU receives it: its packets are read for the figures and written to every DownTrack. */
export class UpTrack {
  readonly downTracks = new Set<DownTrack>();
  /** Padding-only packets dropped so far (DownTracks close the gaps they leave in sequence numbers). */
  dropped = 0;
  /** The SSRC its packets carry (a simulcast layer's is known only from its packets). */
  private ssrc: number | undefined;
  private readonly unsubscribe: () => void;

  constructor(
    readonly kind: 'audio' | 'video',
    private readonly track: MediaStreamTrack,
    private readonly receiver: RTCRtpReceiver,
    media: FakeReceivedMedia,
    audibleDbov: number,
  ) {
    this.unsubscribe = track.onReceiveRtp.subscribe((packet, extensions) => {
      this.ssrc = packet.header.ssrc;
      if (packet.payload.length === 0) {
        this.dropped += 1; // padding only: bandwidth probing, not forwarded
        return;
      }
      let level: number | undefined;
      if (kind === 'video') {
        const start = vp8FrameStart(packet.payload);
        if (start?.keyFrame) {
          media.videoKeyFrames += 1;
          media.videoWidth = start.width;
          media.videoHeight = start.height;
        }
        if (packet.header.marker) media.videoFrames += 1;
      } else {
        level = (extensions?.[AUDIO_LEVEL_URI] as { level?: number } | undefined)?.level;
        media.audioPackets += 1;
        if (level !== undefined) {
          media.loudestDbov = Math.min(media.loudestDbov, level);
          if (level <= audibleDbov) media.audiblePackets += 1;
        }
      }
      for (const down of this.downTracks) down.write(packet, level);
    }).unSubscribe;
  }

  /** A PLI to the publisher: its encoder sends a key frame. */
  requestKeyFrame(): void {
    const ssrc = this.ssrc ?? this.track.ssrc;
    if (ssrc !== undefined) void this.receiver.sendRtcpPLI(ssrc).catch(() => undefined);
  }

  stop(): void {
    this.unsubscribe();
    for (const down of this.downTracks) down.stop();
  }
}

/**
 * An UpTrack forwarded to one subscriber on a send-only transceiver of its subscriber connection
 * (msid `<participant sid>|<track sid>`, what the SDKs map to participant and publication).
 * Video starts on a key frame; sequence numbers stay contiguous across dropped packets.
 */
export class DownTrack {
  private started: boolean;
  /** The UpTrack's dropped count when this one started: later drops are taken out of sequence numbers. */
  private droppedAtStart = 0;
  private keyFrameTimer: NodeJS.Timeout | undefined;
  private stopped = false;
  private readonly unsubscribePli: () => void;

  constructor(
    private readonly up: UpTrack,
    readonly transceiver: RTCRtpTransceiver,
    keyFrameRequestIntervalMs: number,
  ) {
    this.started = up.kind === 'audio';
    this.droppedAtStart = up.dropped;
    up.downTracks.add(this);
    this.unsubscribePli = transceiver.sender.onPictureLossIndication.subscribe(() => up.requestKeyFrame()).unSubscribe;
    if (!this.started) {
      up.requestKeyFrame();
      this.keyFrameTimer = setInterval(() => up.requestKeyFrame(), keyFrameRequestIntervalMs);
      this.keyFrameTimer.unref();
    }
  }

  static open(up: UpTrack, pc: RTCPeerConnection, streamId: string, keyFrameRequestIntervalMs: number): DownTrack {
    const transceiver = pc.addTransceiver(up.kind, { direction: 'sendonly', streams: [new MediaStream({ id: streamId })] });
    return new DownTrack(up, transceiver, keyFrameRequestIntervalMs);
  }

  write(packet: RtpPacket, audioLevel: number | undefined): void {
    if (this.stopped) return;
    const sender = this.transceiver.sender;
    // Until the subscriber connection is up werift drops what it is given: a key frame sent then
    // would be lost and the subscriber left with frames it cannot decode, so start after.
    if (sender.dtlsTransport?.state !== 'connected' || !sender.codec) return;
    if (!this.started) {
      if (!vp8FrameStart(packet.payload)?.keyFrame) return;
      this.started = true;
      this.droppedAtStart = this.up.dropped;
      clearInterval(this.keyFrameTimer);
    }
    // The extension ids this connection negotiated: werift keeps them on the sender, not in its typings.
    const negotiated = (sender as unknown as { headerExtensions?: ReadonlyArray<{ uri: string; id: number }> }).headerExtensions;
    const audioLevelId = negotiated?.find((e) => e.uri === AUDIO_LEVEL_URI)?.id;
    // A copy per subscriber: werift's sender rewrites the header it is given (SSRC, payload type,
    // its own extensions), and the publisher's extension ids mean nothing on this connection.
    const header = new RtpHeader({
      marker: packet.header.marker,
      payloadType: packet.header.payloadType,
      sequenceNumber: (packet.header.sequenceNumber - (this.up.dropped - this.droppedAtStart)) & 0xffff,
      timestamp: packet.header.timestamp,
      ssrc: packet.header.ssrc,
      extensions: audioLevel !== undefined && audioLevelId !== undefined ? [{ id: audioLevelId, payload: Buffer.from([audioLevel & 0x7f]) }] : [],
    });
    void sender.sendRtp(new RtpPacket(header, packet.payload)).catch(() => undefined);
  }

  /** The subscriber no longer gets this track (its transceiver goes inactive at the next offer). */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    clearInterval(this.keyFrameTimer);
    this.unsubscribePli();
    this.up.downTracks.delete(this);
  }
}
