/**
 * The avatar worker of LiveKit's avatar protocol (what the hosted vendors' workers do for
 * LiveKit Agents): it joins the agent's room with a token the agent minted (identity of the
 * avatar, attribute `lk.publish_on_behalf` = the agent), takes the agent's speech from
 * `lk.audio_stream` byte streams at whatever rate they come, drives a face session with it,
 * publishes the lip-synced video and the audio in the room (the agent's clients show them as
 * the agent's, by the attribute), answers `lk.clear_buffer` at once (the face fades, the queued
 * sound is dropped) and calls `lk.playback_started` / `lk.playback_finished` on the agent with
 * the played position. Facts of the protocol: docs/livekit-agents.md.
 *
 * It ends when the agent leaves the room, the room closes, `maxDurationMs` passes, the face
 * session ends, or `close()`; `ended` says why. It joins through the SSRF address policy of
 * every LiveKit join (`joinLiveKitRoom`). The face session is its caller's: the worker closes
 * it when it ends.
 */
import { map } from 'rxjs';
import { DisconnectReason, RoomEvent, RpcError, type ByteStreamReader, type RemoteParticipant, type RpcInvocationData } from '@livekit/rtc-node';
import { errorMessage } from '../../core/error-message.ts';
import { resolveOptions } from '../../core/options.ts';
import { FACE_TIMING, type FaceSession } from '../../processors/avatar/face-model.ts';
import { RoomError } from '../webrtc/room-errors.ts';
import { AVATAR_AUDIO_LIMITS, AVATAR_PROTOCOL, AvatarAudioStreamDecoder, AvatarAudioStreamError } from './avatar-audio-stream.ts';
import { AvatarPlayback, type AvatarPlaybackEvent } from './avatar-playback.ts';
import { joinLiveKitRoom, publishFramesToRoom, type JoinedLiveKitRoom, type LiveKitAvatarPublication, type LiveKitJoinOptions } from './livekit-publisher.ts';

export const LIVEKIT_AVATAR_WORKER_DEFAULTS = {
  /** A session's longest life (the operator's bound on a forgotten session). */
  maxDurationMs: 60 * 60_000,
  /** How long the agent may take to be in the room after the avatar joined. */
  agentWaitMs: 15_000,
  /**
   * Audio the output may queue ahead of playout (ms). What waits there is heard that much later
   * (6-9 ms at a speech picture on a quiet machine, about 65 ms under load earlier), its pictures
   * held with it (`pictureLagMs`), and is what an interruption drops. Not below the frame pump's `sinkAheadMs` (120 ms): with a smaller queue the pump takes
   * the sink's pacing for a decoding backlog and skips most pictures (observed with 100 ms: 131
   * of 151 skipped).
   */
  audioQueueMs: 200,
  /**
   * Used only when `pictureLagMs` is null: pictures held back this many frames (40 ms each)
   * behind whatever audio is queued. The way to a visitor
   * shows a picture sooner than its sound: through the fake SFU forwarding packets, an rtc-node
   * visitor saw a picture 14 ms and heard a sound 85 ms after their capture (`npm run bench --
   * livekit-transport`). Measured with `bench -- livekit-avatar` (5 runs each, quiet machine,
   * 2026-11-30): 2 frames put the moving mouth 75 ms after its sound (83 at worst; first byte to
   * synced frame 161 ms); 0 frames, 0 ms (45 at worst; 89 ms); 1 frame, 27 ms after it (39 at
   * worst; 120 ms). The embedded publisher keeps 2 (chromium plays video sooner).
   */
  videoDelayFrames: 1,
  /**
   * A turn's speech does not wait behind the idle silence the audio source still holds: at its
   * start that silence is dropped down to this lead (ms), kept against late frames (a frame later
   * than the lead is a gap in the sound). bench livekit-avatar on a loaded machine: the audio queued
   * at a speech picture 106 -> 23 ms, the first audible sound 346 -> 189 ms (docs/livekit-agents.md).
   */
  speechLeadMs: 20,
  /**
   * When a number, each picture is sent when its own sound is, plus this lag (ms), however much
   * audio is queued ahead of it (`LiveKitMediaSink`), and `videoDelayFrames` is not used; null
   * holds pictures back by the frame count above. bench livekit-avatar, alternated (2026-12-02,
   * inline, 5 runs each, load about 2): with 0 the first synced frame came 139 and 130 ms after the
   * first TTS byte (p50) against 214 and 221 with 1 frame, the A/V offset at the visitor 0 and -17
   * ms p50 (largest 45 and 53) against +28 and +35 (69 and 68); clear to silence alike.
   */
  pictureLagMs: 0 as number | null,
} as const;

/** RPC error codes the worker answers with (application codes: LiveKit reserves 1001-1999). */
export const AVATAR_RPC_ERRORS = {
  /** The caller is not the agent this avatar speaks for. */
  notTheAgent: 2403,
} as const;

export type AvatarWorkerEndReason = 'agent_left' | 'agent_absent' | 'room_closed' | 'time_limit' | 'face_ended' | 'closed';

export interface LiveKitAvatarWorkerOptions extends LiveKitJoinOptions {
  /** The identity whose speech the avatar plays and whose RPCs it answers (its `lk.publish_on_behalf`). */
  readonly agentIdentity: string;
  readonly face: FaceSession;
  readonly maxDurationMs?: number;
  readonly agentWaitMs?: number;
  readonly audioQueueMs?: number;
  readonly videoDelayFrames?: number;
  readonly speechLeadMs?: number;
  readonly pictureLagMs?: number | null;
  /** Faults that end nothing (a refused stream, a failed RPC): for the owner's log. */
  readonly onWarning?: (message: string, details: Record<string, unknown>) => void;
  /**
   * Figures as they happen, for the owner's metrics: `first_frame` (epoch ms of the first picture
   * out), `av_offset` (ms a picture at a speech frame went out before its sound, `avOffsetMs`, at most once a second),
   * `clear` (ms an `lk.clear_buffer` took).
   */
  readonly onMeasure?: (what: 'first_frame' | 'av_offset' | 'clear', value: number) => void;
}

export interface LiveKitAvatarWorkerStats {
  /** ms from `start()` to joined with the audio track published. */
  joinMs: number;
  /** Epoch ms of the first picture handed to the video source (null before). */
  firstFrameAtMs: number | null;
  /** Epoch ms of the first agent audio received, and of the first frame that played it. */
  firstAudioAtMs: number | null;
  firstSpeechFrameAtMs: number | null;
  /**
   * How much sooner the latest picture (at a speech frame) went out than its sound (ms; negative:
   * after it), as the publication measures it (`LiveKitAvatarPublication.pictureLeadMs`).
   */
  avOffsetMs: number | null;
  /** Times the audio sent ran dry between two deliveries, and for how long in all (ms): gaps the visitor's jitter buffer must cover (read from the media sink). */
  readonly audioUnderruns: number;
  readonly audioUnderrunMs: number;
  segments: number;
  segmentsInterrupted: number;
  clears: number;
  /** ms from the last `lk.clear_buffer` to the queued sound dropped and the face cancelled. */
  lastClearMs: number | null;
  /** Epoch ms the last `lk.clear_buffer` arrived. */
  lastClearAtMs: number | null;
  streamsRefused: number;
  /** The last stream fault (`missing_audio_format`, `bad_sample_rate`, `not_the_agent`, ...). */
  lastStreamError: { readonly code: string; readonly message: string } | null;
  rpcFailures: number;
}

export class LiveKitAvatarWorker {
  readonly stats: LiveKitAvatarWorkerStats = {
    joinMs: 0, firstFrameAtMs: null, firstAudioAtMs: null, firstSpeechFrameAtMs: null, avOffsetMs: null,
    // Read from the media sink when asked (they change with every 10 ms of audio, not with a frame).
    audioUnderruns: 0, audioUnderrunMs: 0,
    segments: 0, segmentsInterrupted: 0, clears: 0, lastClearMs: null, lastClearAtMs: null, streamsRefused: 0, lastStreamError: null, rpcFailures: 0,
  };
  /** Settles with why the worker ended (it has left the room and closed the face by then). */
  readonly ended: Promise<AvatarWorkerEndReason>;
  private resolveEnded!: (reason: AvatarWorkerEndReason) => void;
  private readonly playback = new AvatarPlayback();
  private readonly settings: { maxDurationMs: number; agentWaitMs: number; audioQueueMs: number; videoDelayFrames: number; speechLeadMs: number; pictureLagMs: number | null };
  private publication: LiveKitAvatarPublication | undefined;
  private streams: Promise<void> = Promise.resolve();
  private rpcs: Promise<void> = Promise.resolve();
  private readonly timers: NodeJS.Timeout[] = [];
  private ending: Promise<void> | undefined;
  private firstReason: AvatarWorkerEndReason | null = null;
  private avSampledAt = 0;

  private constructor(
    private readonly joined: JoinedLiveKitRoom,
    private readonly options: LiveKitAvatarWorkerOptions,
  ) {
    this.settings = resolveOptions(LIVEKIT_AVATAR_WORKER_DEFAULTS, { maxDurationMs: options.maxDurationMs, agentWaitMs: options.agentWaitMs, audioQueueMs: options.audioQueueMs, videoDelayFrames: options.videoDelayFrames, speechLeadMs: options.speechLeadMs, pictureLagMs: options.pictureLagMs });
    this.ended = new Promise((resolve) => (this.resolveEnded = resolve));
    Object.defineProperties(this.stats, {
      audioUnderruns: { enumerable: true, get: () => this.publication?.sinkStats.underruns ?? 0 },
      audioUnderrunMs: { enumerable: true, get: () => Math.round(this.publication?.sinkStats.underrunMs ?? 0) },
    });
  }

  /**
   * Joins and starts publishing. Rejects with `RoomError('publish_failed')` (one message for every
   * cause, see `joinLiveKitRoom`), after closing the face session.
   */
  static async start(options: LiveKitAvatarWorkerOptions): Promise<LiveKitAvatarWorker> {
    const startedAt = Date.now();
    let joined: JoinedLiveKitRoom;
    try {
      joined = await joinLiveKitRoom(options, { autoSubscribe: false });
    } catch (error) {
      options.face.close();
      throw error;
    }
    const worker = new LiveKitAvatarWorker(joined, options);
    try {
      await worker.begin();
    } catch (error) {
      await worker.finish('closed');
      throw error instanceof RoomError ? error : new RoomError('publish_failed', error instanceof Error ? error.message : String(error));
    }
    worker.stats.joinMs = Date.now() - startedAt;
    return worker;
  }

  /** The avatar's identity in the room. */
  get identity(): string {
    return this.joined.participant.identity;
  }

  get room(): string {
    return this.joined.room.name ?? '';
  }

  get agentIdentity(): string {
    return this.options.agentIdentity;
  }

  /** Video size being published (0 x 0 before the first picture). */
  get videoSize(): { readonly width: number; readonly height: number } {
    return { width: this.publication?.stats.width ?? 0, height: this.publication?.stats.height ?? 0 };
  }

  /** Stops publishing, leaves the room, closes the face session. Idempotent. */
  close(reason: AvatarWorkerEndReason = 'closed'): Promise<void> {
    return this.finish(reason);
  }

  /** Why it is ending, from the moment it began to (before `ended` resolves, its leave may take seconds); null while it runs. */
  get endingReason(): AvatarWorkerEndReason | null {
    return this.firstReason;
  }

  private async begin(): Promise<void> {
    const room = this.joined.room;
    const participant = this.joined.participant;
    // Handlers first: an interruption or a segment may come as soon as the agent sees us.
    participant.registerRpcMethod(AVATAR_PROTOCOL.clearBufferMethod, (data) => this.onClearBuffer(data));
    room.registerByteStreamHandler(AVATAR_PROTOCOL.audioStreamTopic, (reader, from) => {
      // A stream that will be refused is refused now, not queued behind the agent's open segment:
      // the SDK buffers a stream's chunks until it is read or closed, without bound.
      if (this.ending) return void reader.close();
      if (from.identity !== this.options.agentIdentity) return this.refuseStranger(reader, from.identity);
      this.streams = this.streams
        .then(() => this.readStream(reader, from.identity))
        .catch((error: unknown) => {
          // readStream handles its own faults; were one to escape, the next segments must still
          // be read (a rejected chain skips them all, and the agent waits for their playout).
          this.refuseStream('stream_failed', errorMessage(error));
          void reader.close();
        });
    });
    room
      .on(RoomEvent.ParticipantDisconnected, (p: RemoteParticipant) => {
        if (p.identity !== this.options.agentIdentity) return;
        // A deleted or closed room removes everyone: the agent's departure may reach us before our
        // own leave, and says why (LiveKit's disconnect reason).
        const reason = p.disconnectReason;
        void this.finish(reason === DisconnectReason.ROOM_DELETED || reason === DisconnectReason.ROOM_CLOSED ? 'room_closed' : 'agent_left');
      })
      .on(RoomEvent.ParticipantConnected, (p: RemoteParticipant) => {
        if (p.identity === this.options.agentIdentity) this.clearAgentWait();
      })
      .on(RoomEvent.Disconnected, () => void this.finish('room_closed'));
    const frames = this.options.face.frames.pipe(map((frame) => this.onFrame(frame)));
    const face = this.options.face;
    const { audioQueueMs, videoDelayFrames, speechLeadMs, pictureLagMs } = this.settings;
    const timing = pictureLagMs === null ? { videoDelayFrames } : { videoDelayFrames: 0, pictureLagMs };
    this.publication = await publishFramesToRoom(room, frames, { simulcast: false, audioQueueMs, speechLeadMs, ...timing, videoSize: { width: face.width, height: face.height } });
    if (this.ending) {
      // Ended while publishing started (the agent left, the room closed): `finish` found no
      // publication to stop, and no timer may be set now (the time limit would hold the worker
      // for its full hour).
      await this.publication.stop().catch(() => undefined);
      return;
    }
    void this.publication.ended.then(() => this.finish('face_ended'));
    this.timers.push(setTimeout(() => void this.finish('time_limit'), this.settings.maxDurationMs));
    if (!room.remoteParticipants.has(this.options.agentIdentity)) {
      this.timers.push(setTimeout(() => {
        if (!room.remoteParticipants.has(this.options.agentIdentity)) void this.finish('agent_absent');
      }, this.settings.agentWaitMs));
    }
  }

  private clearAgentWait(): void {
    // The time limit stays; only the absence timer (the second, when set) goes.
    for (const timer of this.timers.splice(1)) clearTimeout(timer);
  }

  /** Every frame on its way to the room: playback bookkeeping, a cleared turn's sound silenced. */
  private onFrame(frame: Parameters<AvatarPlayback['observe']>[0]): typeof frame {
    const now = Date.now();
    if (this.stats.firstFrameAtMs === null) {
      this.stats.firstFrameAtMs = now;
      this.options.onMeasure?.('first_frame', now);
    }
    const { frame: out, events } = this.playback.observe(frame);
    if (out.type === 'speech-start' || out.type === 'speech') {
      if (this.stats.firstSpeechFrameAtMs === null && out.type === 'speech-start') this.stats.firstSpeechFrameAtMs = now;
      const lead = this.publication?.pictureLeadMs ?? null;
      this.stats.avOffsetMs = lead === null ? null : Math.round(lead);
      if (this.stats.avOffsetMs !== null && now - this.avSampledAt >= 1000) {
        this.avSampledAt = now;
        this.options.onMeasure?.('av_offset', this.stats.avOffsetMs);
      }
    }
    this.report(events);
    return out;
  }

  /** Only the agent speaks through its avatar; a stranger's stream is not a segment of the agent's. */
  private refuseStranger(reader: ByteStreamReader, from: string): void {
    this.refuseStream('not_the_agent', `an lk.audio_stream from ${from}, who is not the agent ${this.options.agentIdentity}`);
    void reader.close();
  }

  private async readStream(reader: ByteStreamReader, from: string): Promise<void> {
    if (this.ending) return void reader.close();
    const face = this.options.face;
    const segment = this.playback.openSegment();
    this.stats.segments++;
    let decoder: AvatarAudioStreamDecoder;
    try {
      decoder = new AvatarAudioStreamDecoder(reader.info.attributes);
    } catch (error) {
      this.refuseStream(error instanceof AvatarAudioStreamError ? error.code : 'bad_stream', error instanceof Error ? error.message : String(error));
      // The agent counted this segment: it is finished (interrupted, nothing heard), or the
      // agent would wait for its playout forever.
      face.startTurn();
      face.endTurn();
      this.report(this.playback.closeSegment(segment, { failed: true }));
      return void reader.close();
    }
    face.startTurn();
    let truncated = false;
    const maxQueued = Math.floor((AVATAR_AUDIO_LIMITS.maxQueuedMs / 1000) * FACE_TIMING.audioSampleRate);
    try {
      for await (const chunk of reader) {
        if (this.playback.isCleared(segment) || this.ending) break;
        const pcm = decoder.push(chunk);
        if (pcm.length === 0) continue;
        if (this.playback.unplayedSamples + pcm.length > maxQueued) {
          throw new AvatarAudioStreamError('queue_full', `more than ${AVATAR_AUDIO_LIMITS.maxQueuedMs / 1000} s of audio would wait to be played; the rest of this segment is refused`);
        }
        this.stats.firstAudioAtMs ??= Date.now();
        face.pushAudio(pcm);
        this.playback.addSamples(segment, pcm.length);
      }
      if (!this.playback.isCleared(segment) && !this.ending) {
        const tail = decoder.flush();
        if (tail.length > 0) {
          face.pushAudio(tail);
          this.playback.addSamples(segment, tail.length);
        }
      }
    } catch (error) {
      await reader.close();
      // Ending: the SDK errors the open reader ("disconnected"); nothing was refused.
      if (this.ending) return;
      // Over a limit, or the stream failing: what was queued plays, the rest is refused, and the
      // segment finishes interrupted at what was heard (the agent must not take it as all heard).
      truncated = true;
      this.refuseStream(error instanceof AvatarAudioStreamError ? error.code : 'stream_failed', error instanceof Error ? error.message : String(error));
    }
    if (this.ending) return;
    if (!this.playback.isCleared(segment)) face.endTurn();
    this.report(this.playback.closeSegment(segment, { truncated }));
  }

  private refuseStream(code: string, message: string): void {
    this.stats.streamsRefused++;
    this.stats.lastStreamError = { code, message };
    this.options.onWarning?.('lk.audio_stream refused', { code, message });
  }

  private async onClearBuffer(data: RpcInvocationData): Promise<string> {
    if (data.callerIdentity !== this.options.agentIdentity) {
      throw new RpcError(AVATAR_RPC_ERRORS.notTheAgent, `only ${this.options.agentIdentity} may clear this avatar's buffer`);
    }
    // Ending: nothing plays any more, and the audio source may be closed already.
    if (this.ending) return 'ok';
    const at = performance.now();
    this.stats.clears++;
    this.stats.lastClearAtMs = Date.now();
    // In this order: the face stops deciding speech frames, the queued sound is dropped, and the
    // turns already decided are silenced (AvatarPlayback) on their way out.
    this.options.face.cancel();
    const unplayedMs = this.publication?.clearAudio() ?? 0;
    const events = this.playback.clear(unplayedMs);
    this.stats.lastClearMs = performance.now() - at;
    this.options.onMeasure?.('clear', this.stats.lastClearMs);
    this.report(events);
    return 'ok';
  }

  /** Tells the agent, in order, one RPC at a time. */
  private report(events: readonly AvatarPlaybackEvent[]): void {
    for (const event of events) {
      if (event.type === 'finished' && event.interrupted) this.stats.segmentsInterrupted++;
      const method = event.type === 'started' ? AVATAR_PROTOCOL.playbackStartedMethod : AVATAR_PROTOCOL.playbackFinishedMethod;
      // The payload the agents parse (snake_case, as the Python AvatarRunner sends it).
      const payload = event.type === 'started' ? '' : JSON.stringify({ playback_position: event.positionS, interrupted: event.interrupted, synchronized_transcript: null });
      this.rpcs = this.rpcs.then(async () => {
        if (this.ending) return;
        try {
          await this.joined.participant.performRpc({ destinationIdentity: this.options.agentIdentity, method, payload });
        } catch (error) {
          this.stats.rpcFailures++;
          this.options.onWarning?.(`${method} failed`, { error: error instanceof Error ? error.message : String(error), code: (error as { code?: unknown }).code });
        }
      });
    }
  }

  private finish(reason: AvatarWorkerEndReason): Promise<void> {
    this.firstReason ??= reason;
    this.ending ??= (async () => {
      for (const timer of this.timers.splice(0)) clearTimeout(timer);
      // No new segment or clear from here on (the handlers would reach a closed audio source).
      try {
        this.joined.room.unregisterByteStreamHandler(AVATAR_PROTOCOL.audioStreamTopic);
        this.joined.participant.unregisterRpcMethod(AVATAR_PROTOCOL.clearBufferMethod);
      } catch {
        // the room is gone already
      }
      this.options.face.close();
      if (this.publication) await this.publication.stop().catch(() => undefined);
      await this.joined.leave();
      this.resolveEnded(reason);
    })();
    return this.ending;
  }
}
