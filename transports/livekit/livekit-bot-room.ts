/**
 * A bot's seat in a LiveKit room, over ONE connection of @livekit/rtc-node: it publishes the
 * avatar (the same tracks as `publishToLiveKit`), hears the other participants' microphones,
 * reads and sends session messages as LiveKit data packets, and reports who is there in the
 * shape of the embedded room (`RoomSubscriberEvent`), so whatever runs a bot in an embedded room
 * runs it here too. The input side is `LiveKitAudioInput` (livekit-audio-input.ts), the LiveKit
 * twin of `RoomAudioInput`.
 *
 * - Audio: every remote microphone track is subscribed and read with an rtc-node `AudioStream`
 *   (mono, `audioSampleRate`, 10 ms frames) into `participantAudio`, tagged with the
 *   participant's identity.
 * - Messages: reliable data packets on the topic `LIVEKIT_SESSION_TOPIC`, one UTF-8 JSON object per
 *   packet, both ways. Incoming ones get the embedded room's checks (a JSON object, at most the
 *   session protocol's client message size, at most `maxMessagesPerSecond` per participant);
 *   the others are dropped and counted (`stats`), never thrown.
 * - Presence: `joined` when a participant appears, `peer-state connected` once its media or data
 *   reached the bot (its microphone track was subscribed, or a message arrived: LiveKit tells
 *   others nothing about a peer connection's state), `left` when it disconnects or the bot's
 *   connection ends.
 *
 * docs/webrtc.md ("LiveKit bot rooms") and docs/sessions.md ("LiveKit rooms").
 */
import { resolveOptions } from '../../core/options.ts';
import { Subject, type Observable } from 'rxjs';
import {
  AudioStream,
  type AudioFrame,
  RoomEvent,
  TrackKind,
  TrackSource,
  type RemoteParticipant,
  type RemoteTrack,
  type RemoteTrackPublication,
  type Room,
} from '@livekit/rtc-node';
import type { FaceFrame } from '../../processors/avatar/face-model.ts';
import type { PublishedAvatar } from '../webrtc/embedded-publisher.ts';
import type { ParticipantAudio, RoomClientMessage, RoomSubscriberEvent, RoomSubscriberInfo } from '../webrtc/room.ts';
import { RoomError } from '../webrtc/room-errors.ts';
import { SIGNALLING_LIMITS } from '../../protocol/room-signalling.ts';
import { joinLiveKitRoom, publishFramesToRoom, type JoinedLiveKitRoom, type LiveKitAvatarPublication, type LiveKitJoinOptions, type PublishFramesOptions } from './livekit-publisher.ts';

/** The data packet topic of session messages in LiveKit rooms (both directions). */
export const LIVEKIT_SESSION_TOPIC = 'session';

export const LIVEKIT_BOT_ROOM_DEFAULTS = {
  /** Rate the remote microphones are read at (rtc-node resamples; 16 kHz is what the speech engines take). */
  audioSampleRate: 16_000,
  /** Incoming session messages per participant per second before they are dropped (as the embedded room's socket). */
  maxMessagesPerSecond: SIGNALLING_LIMITS.maxMessagesPerSecond,
  /** Bound on each wait when leaving: unpublishing, then the queued outgoing messages. */
  flushTimeoutMs: 2_000,
} as const;

export interface LiveKitBotRoomOptions extends LiveKitJoinOptions {
  readonly audioSampleRate?: number;
  readonly maxMessagesPerSecond?: number;
  readonly flushTimeoutMs?: number;
}

export interface LiveKitBotRoomStats {
  /** Data packets received that were not session messages or failed the checks. */
  messagesDropped: number;
  /** Why the last one was dropped (for logs). */
  lastDropReason: string | null;
  /** Session messages sent / failed to send. */
  messagesSent: number;
  sendFailures: number;
  /** 10 ms audio frames read from remote microphones. */
  audioFrames: number;
}

/** Waits for `promise` at most `ms` (it goes on in the background after that). */
async function within(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([promise.catch(() => undefined), new Promise((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}

const decoder = new TextDecoder('utf-8', { fatal: true });
const encoder = new TextEncoder();

/** The embedded room's client message checks, on a data packet's payload. */
export function parseLiveKitClientMessage(payload: Uint8Array): { message: Readonly<Record<string, unknown>> } | { refused: string } {
  if (payload.byteLength > SIGNALLING_LIMITS.maxClientMessageBytes) return { refused: `client messages are limited to ${SIGNALLING_LIMITS.maxClientMessageBytes} bytes of JSON` };
  let value: unknown;
  try {
    value = JSON.parse(decoder.decode(payload));
  } catch {
    return { refused: 'a session message must be UTF-8 JSON' };
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) return { refused: 'a session message must be a JSON object' };
  return { message: value as Readonly<Record<string, unknown>> };
}

interface Visitor {
  readonly identity: string;
  state: RTCPeerConnectionState | 'none';
  /**
   * The readers of its microphone streams. A stream is cancelled through its reader: `cancel()` on
   * the locked stream itself only rejects (the Streams standard), so it never reached the SDK's
   * teardown (its FFI listener, its native handle); the native side's end of stream did.
   */
  readonly readers: Set<ReadableStreamDefaultReader<AudioFrame>>;
  windowStart: number;
  windowCount: number;
}

export class LiveKitBotRoom {
  private readonly audio = new Subject<ParticipantAudio>();
  private readonly fromClients = new Subject<RoomClientMessage>();
  private readonly presence = new Subject<RoomSubscriberEvent>();
  private readonly visitors = new Map<string, Visitor>();
  private readonly pendingSends = new Set<Promise<void>>();
  private publication: LiveKitAvatarPublication | undefined;
  private closing: Promise<void> | undefined;
  private disconnected = false;
  private shut = false;
  readonly stats: LiveKitBotRoomStats = { messagesDropped: 0, lastDropReason: null, messagesSent: 0, sendFailures: 0, audioFrames: 0 };
  /** Settles when the bot is out of the room (it left, or the server ended its connection). */
  readonly ended: Promise<void>;
  private resolveEnded!: () => void;

  /** LIVEKIT_BOT_ROOM_DEFAULTS with the options over them. */
  private readonly settings: { audioSampleRate: number; maxMessagesPerSecond: number; flushTimeoutMs: number };

  private constructor(
    private readonly joined: JoinedLiveKitRoom,
    private readonly options: LiveKitBotRoomOptions,
  ) {
    this.ended = new Promise((resolve) => (this.resolveEnded = resolve));
    const { audioSampleRate, maxMessagesPerSecond, flushTimeoutMs } = resolveOptions(LIVEKIT_BOT_ROOM_DEFAULTS, {
      audioSampleRate: options.audioSampleRate,
      maxMessagesPerSecond: options.maxMessagesPerSecond,
      flushTimeoutMs: options.flushTimeoutMs,
    });
    this.settings = { audioSampleRate, maxMessagesPerSecond, flushTimeoutMs };
  }

  /** Joins the room (auto-subscribing); rejects with `RoomError('publish_failed')` as `publishToLiveKit` does. */
  static async join(options: LiveKitBotRoomOptions): Promise<LiveKitBotRoom> {
    const joined = await joinLiveKitRoom(options, { autoSubscribe: true });
    const bot = new LiveKitBotRoom(joined, options);
    bot.attach();
    return bot;
  }

  get room(): Room {
    return this.joined.room;
  }

  /** The bot's identity in the room. */
  get participantId(): string {
    return this.joined.participant.identity;
  }

  get name(): string {
    return this.joined.room.name ?? '';
  }

  /** The server ended the bot's connection (room deleted, kicked) or the bot left. */
  get closed(): boolean {
    return this.disconnected || this.closing !== undefined;
  }

  /** Remote microphones, 10 ms at a time, tagged with the participant's identity (hot). */
  get participantAudio(): Observable<ParticipantAudio> {
    return this.audio.asObservable();
  }

  /** Session messages from participants that passed the checks (hot; completes when the bot is out). */
  get clientMessages(): Observable<RoomClientMessage> {
    return this.fromClients.asObservable();
  }

  /** Participants joining, reaching the bot, leaving (hot; completes when the bot is out). */
  get subscriberEvents(): Observable<RoomSubscriberEvent> {
    return this.presence.asObservable();
  }

  /** The other participants now (take this, then follow `subscriberEvents`). */
  subscribers(): RoomSubscriberInfo[] {
    return [...this.visitors.values()].map((v) => ({ participantId: v.identity, peerState: v.state }));
  }

  /**
   * Sends a session message to everyone else in the room (reliable data packet, topic
   * `LIVEKIT_SESSION_TOPIC`). Returns how many participants it was addressed to (0 once closed).
   */
  sendMessage(message: Readonly<Record<string, unknown>>): number {
    if (this.closed) return 0;
    const payload = encoder.encode(JSON.stringify(message));
    const sent = this.joined.participant
      .publishData(payload, { reliable: true, topic: LIVEKIT_SESSION_TOPIC })
      .then(
        () => void this.stats.messagesSent++,
        () => void this.stats.sendFailures++,
      );
    this.pendingSends.add(sent);
    void sent.finally(() => this.pendingSends.delete(sent));
    return this.visitors.size;
  }

  /**
   * Publishes the avatar over this connection. One publication at a time; closing it unpublishes
   * (the bot stays in the room until `close()`).
   */
  async publishAvatar(frames: Observable<FaceFrame>, options: PublishFramesOptions = {}): Promise<PublishedAvatar> {
    if (this.closed) throw new RoomError('room_closed', `LiveKit room ${this.name} is closed`);
    if (this.publication) throw new RoomError('already_publishing', `the bot already publishes in LiveKit room ${this.name}`);
    // One viewer per session: no simulcast layers unless asked (one encoding on the bot's CPU).
    const publication = await publishFramesToRoom(this.joined.room, frames, { simulcast: false, ...options });
    this.publication = publication;
    void publication.ended.then(() => {
      if (this.publication === publication) this.publication = undefined;
    });
    return {
      participantId: this.participantId,
      room: this.name,
      stats: publication.stats,
      ended: publication.ended,
      close: () => publication.stop(),
      sendMessage: (message) => this.sendMessage(message),
    };
  }

  /** Stops publishing, waits (bounded) for queued messages, leaves the room. Idempotent. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      const bound = this.settings.flushTimeoutMs;
      // Bounded: a publication stuck in the SDK (a track never acknowledged) must not keep the
      // bot in the room; leaving ends it anyway.
      if (this.publication) await within(this.publication.stop(), bound);
      if (this.pendingSends.size > 0) await within(Promise.allSettled([...this.pendingSends]), bound);
      await this.joined.leave();
      this.shutDown('left');
    })();
    return this.closing;
  }

  // ---- SDK events ---------------------------------------------------------------------------------

  private attach(): void {
    const room = this.joined.room;
    room
      .on(RoomEvent.ParticipantConnected, (p) => this.onJoined(p))
      .on(RoomEvent.ParticipantDisconnected, (p) => this.onLeft(p.identity, 'disconnected'))
      .on(RoomEvent.TrackSubscribed, (track, publication, p) => this.onTrack(track, publication, p))
      .on(RoomEvent.DataReceived, (payload, p, _kind, topic) => this.onData(payload, p, topic))
      .on(RoomEvent.Disconnected, () => {
        this.disconnected = true;
        void this.publication?.stop();
        void this.joined.leave();
        this.shutDown('room closed');
      });
    // Participants already there when the bot joined, and their tracks (auto-subscribe brings them).
    for (const p of room.remoteParticipants.values()) this.onJoined(p);
  }

  private onJoined(p: RemoteParticipant): void {
    if (this.visitors.has(p.identity) || this.shut) return;
    this.visitors.set(p.identity, { identity: p.identity, state: 'none', readers: new Set(), windowStart: 0, windowCount: 0 });
    this.presence.next({ type: 'joined', participantId: p.identity });
  }

  private reached(identity: string): void {
    const v = this.visitors.get(identity);
    if (!v || v.state === 'connected') return;
    v.state = 'connected';
    this.presence.next({ type: 'peer-state', participantId: identity, state: 'connected' });
  }

  private onLeft(identity: string, reason: string): void {
    const v = this.visitors.get(identity);
    if (!v) return;
    this.visitors.delete(identity);
    for (const reader of v.readers) void reader.cancel().catch(() => undefined);
    this.presence.next({ type: 'left', participantId: identity, reason });
  }

  private onTrack(track: RemoteTrack, publication: RemoteTrackPublication, p: RemoteParticipant): void {
    if (track.kind !== TrackKind.KIND_AUDIO || this.closed) return;
    if (publication.source !== undefined && publication.source !== TrackSource.SOURCE_MICROPHONE && publication.source !== TrackSource.SOURCE_UNKNOWN) return;
    this.onJoined(p);
    const visitor = this.visitors.get(p.identity)!;
    const stream = new AudioStream(track, { sampleRate: this.settings.audioSampleRate, numChannels: 1 });
    const reader = stream.getReader();
    visitor.readers.add(reader);
    this.reached(p.identity);
    void this.read(p.identity, reader).finally(() => visitor.readers.delete(reader));
  }

  private async read(identity: string, reader: ReadableStreamDefaultReader<AudioFrame>): Promise<void> {
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done || this.closed) break;
        this.stats.audioFrames++;
        if (this.audio.observed) this.audio.next({ participantId: identity, samples: value.data, sampleRate: value.sampleRate, channels: value.channels });
      }
    } catch {
      // the track ended under the reader (participant gone, room closed)
    } finally {
      // Ended early (the bot closing) or by the track: cancelling detaches the stream from the
      // SDK's event emitter and frees its native handle (a no-op on a stream already done).
      await reader.cancel().catch(() => undefined);
      reader.releaseLock();
    }
  }

  private onData(payload: Uint8Array, p: RemoteParticipant | undefined, topic: string | undefined): void {
    if (this.closed) return;
    const drop = (why: string) => {
      this.stats.messagesDropped++;
      this.stats.lastDropReason = why;
    };
    if (!p) return drop('a data packet without a sender');
    if (topic !== LIVEKIT_SESSION_TOPIC) return drop(`topic ${JSON.stringify(String(topic ?? '').slice(0, 40))} is not ${LIVEKIT_SESSION_TOPIC}`);
    this.onJoined(p);
    const visitor = this.visitors.get(p.identity)!;
    const now = Date.now();
    if (now - visitor.windowStart >= 1000) {
      visitor.windowStart = now;
      visitor.windowCount = 0;
    }
    if (++visitor.windowCount > this.settings.maxMessagesPerSecond) return drop('rate limited');
    const parsed = parseLiveKitClientMessage(payload);
    if ('refused' in parsed) return drop(parsed.refused);
    // A message arriving means the participant's connection works: it counts as connected first,
    // so a `client-ready` finds its sender there.
    this.reached(p.identity);
    this.fromClients.next({ participantId: p.identity, message: parsed.message });
  }

  private shutDown(reason: string): void {
    if (this.shut) return;
    this.shut = true;
    for (const identity of [...this.visitors.keys()]) this.onLeft(identity, reason);
    this.joined.room.removeAllListeners();
    this.audio.complete();
    this.fromClients.complete();
    this.presence.complete();
    this.resolveEnded();
  }
}
