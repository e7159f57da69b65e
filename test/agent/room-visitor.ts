/**
 * A headless visitor for bot tests: joins an embedded room over the real signalling WebSocket
 * with the subscriber token, answers the bot's offer with a libwebrtc peer (@roamhq/wrtc, as the
 * bot side), sends a microphone track back on the avatar's audio transceiver (as the browser
 * client's `microphone` option does), decodes the avatar's video and audio, and speaks and reads
 * session messages. The microphone sends silence in real time when it has nothing to say, as a
 * real microphone does (the bot's VAD needs the silence to hear the user stop).
 */
import WebSocket from 'ws';
import { chunkAudio, rms } from '../../core/audio.ts';
import { wrtcWithSources } from '../../transports/webrtc/wrtc.ts';

const MIC_RATE = 16_000;
const CHUNK = MIC_RATE / 100; // 10 ms
const LOUD_SPEECH = 0.02;

export interface VisitorMessage {
  readonly at: number;
  readonly message: Record<string, unknown>;
}

export class RoomVisitor {
  readonly messages: VisitorMessage[] = [];
  readonly signalling: Record<string, unknown>[] = [];
  participantId: string | null = null;
  videoFrames = 0;
  videoSize: { width: number; height: number } | null = null;
  /** When the microphone last sent a 10 ms chunk louder than 0.02 RMS (the end of speech, for latency figures). */
  lastLoudSentAt = 0;
  /** Received audio: 10 ms RMS values (0..1), in arrival order, with arrival times. */
  readonly audioLevels: { at: number; rms: number }[] = [];
  private ws!: WebSocket;
  private pc: RTCPeerConnection | null = null;
  private readonly sinks: { stop(): void }[] = [];
  private readonly mic: InstanceType<ReturnType<typeof wrtcWithSources>['nonstandard']['RTCAudioSource']>;
  private readonly micTrack: MediaStreamTrack;
  private readonly speech: Int16Array[] = [];
  private pump: ReturnType<typeof setInterval> | undefined;
  private pumpStart = 0;
  private chunksSent = 0;
  private closed = false;
  connectionState: RTCPeerConnectionState | 'none' = 'none';
  /** The signalling socket closed (the server went away, or closed the room). */
  signallingClosed = false;
  private media = true;
  /** Each decoded picture (I420: the luma plane is the first width*height bytes), as it arrives. */
  onVideoFrame?: (frame: { width: number; height: number; data: Uint8Array }, at: number) => void;
  /** Each received 10 ms of the bot's audio, as it arrives. */
  onAudio?: (samples: Int16Array, sampleRate: number, channels: number, at: number) => void;

  private constructor() {
    this.mic = new (wrtcWithSources().nonstandard.RTCAudioSource)();
    this.micTrack = this.mic.createTrack();
  }

  /** `media: false`: a page whose peer connection never comes up (offers are not answered). */
  static async join(url: string, token: string, options: { readonly media?: boolean } = {}): Promise<RoomVisitor> {
    const visitor = new RoomVisitor();
    visitor.media = options.media ?? true;
    try {
      await visitor.connect(url, token);
    } catch (error) {
      // Its microphone pump and socket must not outlive a join that failed: they would keep the
      // test's process from ending (ava: "Failed to exit", then its run timeout).
      visitor.close();
      throw error;
    }
    return visitor;
  }

  private connect(url: string, token: string): Promise<void> {
    this.ws = new WebSocket(url);
    this.ws.on('message', (data) => void this.onSignal(JSON.parse(String(data)) as Record<string, unknown>));
    this.ws.on('close', () => (this.signallingClosed = true));
    this.pumpStart = Date.now();
    // The microphone runs in real time: queued speech, else silence, every 10 ms.
    this.pump = setInterval(() => this.feedMicrophone(), 10);
    return new Promise((resolve, reject) => {
      this.ws.once('open', () => this.ws.send(JSON.stringify({ type: 'join', token })));
      const onJoined = (data: WebSocket.RawData) => {
        const m = JSON.parse(String(data)) as Record<string, unknown>;
        if (m.type === 'joined') {
          this.ws.off('message', onJoined);
          resolve();
        } else if (m.type === 'error' && m.fatal) reject(new Error(String(m.message)));
      };
      this.ws.on('message', onJoined);
      this.ws.once('close', () => reject(new Error('signalling closed before joining')));
    });
  }

  private feedMicrophone(): void {
    if (this.closed) return;
    // Catch up to real time (timers are late on a loaded machine).
    const due = Math.floor((Date.now() - this.pumpStart) / 10);
    while (this.chunksSent < due) {
      this.chunksSent++;
      const next = this.speech.shift() ?? new Int16Array(CHUNK);
      if (rms(next) > LOUD_SPEECH) this.lastLoudSentAt = Date.now();
      this.mic.onData({ samples: next, sampleRate: MIC_RATE, bitsPerSample: 16, channelCount: 1, numberOfFrames: CHUNK });
    }
  }

  private async onSignal(m: Record<string, unknown>): Promise<void> {
    this.signalling.push(m);
    switch (m.type) {
      case 'joined':
        this.participantId = m.participant_id as string;
        return;
      case 'app_message':
        this.messages.push({ at: Date.now(), message: m.message as Record<string, unknown> });
        return;
      case 'offer':
        if (this.media) await this.answer(m.pc_id as string, m.sdp as string);
        return;
      case 'candidate':
        if (this.pc && m.candidate) await this.pc.addIceCandidate(m.candidate as RTCIceCandidateInit).catch(() => undefined);
        return;
      case 'unpublished':
        this.endPeer();
        return;
      default:
        return;
    }
  }

  private async answer(pcId: string, sdp: string): Promise<void> {
    this.endPeer();
    const wrtc = wrtcWithSources();
    const pc = new wrtc.RTCPeerConnection({ iceServers: [] });
    this.pc = pc;
    pc.onconnectionstatechange = () => (this.connectionState = pc.connectionState);
    pc.onicecandidate = (e) => {
      const c = e.candidate;
      this.send({ type: 'candidate', pc_id: pcId, candidate: c ? { candidate: c.candidate, sdpMid: c.sdpMid, sdpMLineIndex: c.sdpMLineIndex } : null });
    };
    pc.ontrack = (e) => {
      if (e.track.kind === 'video') {
        const sink = new wrtc.nonstandard.RTCVideoSink(e.track);
        sink.onframe = ({ frame }: { frame: { width: number; height: number; data: Uint8Array } }) => {
          this.videoFrames++;
          this.videoSize = { width: frame.width, height: frame.height };
          this.onVideoFrame?.(frame, Date.now());
        };
        this.sinks.push(sink);
      } else {
        const sink = new wrtc.nonstandard.RTCAudioSink(e.track);
        sink.ondata = (d: { samples: Int16Array; sampleRate: number; channelCount: number }) => {
          this.audioLevels.push({ at: Date.now(), rms: rms(d.samples) });
          this.onAudio?.(d.samples, d.sampleRate, d.channelCount, Date.now());
        };
        this.sinks.push(sink);
      }
    };
    await pc.setRemoteDescription({ type: 'offer', sdp });
    const audio = pc.getTransceivers().find((t) => t.receiver.track?.kind === 'audio');
    if (audio) {
      audio.direction = 'sendrecv';
      await audio.sender.replaceTrack(this.micTrack);
    }
    const answer = await pc.createAnswer();
    await pc.setLocalDescription(answer);
    // As created (its candidates are trickled): reading pc.localDescription back races libwebrtc's
    // signalling thread adding candidates to it (see transports/webrtc/subscriber-peer.ts).
    this.send({ type: 'answer', pc_id: pcId, sdp: answer.sdp });
  }

  private endPeer(): void {
    for (const s of this.sinks.splice(0)) s.stop();
    if (this.pc) {
      this.pc.onicecandidate = null;
      this.pc.ontrack = null;
      this.pc.onconnectionstatechange = null;
      this.pc.close();
      this.pc = null;
      this.connectionState = 'closed';
    }
  }

  send(message: Record<string, unknown>): void {
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(message));
  }

  /** A session protocol message to the bot. */
  sendMessage(message: Record<string, unknown>): void {
    this.send({ type: 'client_message', message });
  }

  /** Queues 16 kHz mono speech on the microphone (played in real time). */
  say(pcm: Int16Array): void {
    for (const c of chunkAudio(pcm, MIC_RATE, 10)) {
      const chunk = new Int16Array(CHUNK);
      chunk.set(c);
      this.speech.push(chunk);
    }
  }

  get speaking(): boolean {
    return this.speech.length > 0;
  }

  /** Messages of one type, in order. */
  ofType(type: string): Record<string, unknown>[] {
    return this.messages.filter((m) => m.message.type === type).map((m) => m.message);
  }

  /** Milliseconds of received audio louder than `threshold` (RMS), since `since`. */
  audibleMs(since = 0, threshold = 0.01): number {
    return this.audioLevels.filter((l) => l.at >= since && l.rms > threshold).length * 10;
  }

  /** Leaves the room (the socket says `leave`, then closes). */
  leave(): void {
    this.send({ type: 'leave' });
    this.close();
  }

  /**
   * The receive jitter buffer's counters for the bot's audio (libwebrtc's inbound-rtp statistics;
   * null before media or when the library does not report them): how much was concealed, stretched
   * or compressed to keep playout going, and the delay it held.
   */
  async audioReceiveStats(): Promise<{ concealedSamples: number; totalSamplesReceived: number; insertedSamplesForDeceleration: number; removedSamplesForAcceleration: number; jitterBufferDelayS: number; jitterBufferEmittedCount: number } | null> {
    if (!this.pc) return null;
    const report = await this.pc.getStats();
    for (const s of report.values() as IterableIterator<Record<string, unknown>>) {
      if (s.type !== 'inbound-rtp' || s.kind !== 'audio') continue;
      const n = (k: string) => (typeof s[k] === 'number' ? (s[k] as number) : 0);
      return {
        concealedSamples: n('concealedSamples'),
        totalSamplesReceived: n('totalSamplesReceived'),
        insertedSamplesForDeceleration: n('insertedSamplesForDeceleration'),
        removedSamplesForAcceleration: n('removedSamplesForAcceleration'),
        jitterBufferDelayS: n('jitterBufferDelay'),
        jitterBufferEmittedCount: n('jitterBufferEmittedCount'),
      };
    }
    return null;
  }

  /** Drops everything at once, like a tab that died (no `leave`). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.pump);
    this.endPeer();
    this.micTrack.stop();
    this.ws.close();
  }
}
