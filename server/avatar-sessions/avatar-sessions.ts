/**
 * Avatar sessions: our face in other people's LiveKit Agents (docs/livekit-agents.md). An agent
 * asks for one with `POST /v1/avatar-sessions` (its API key, a `config_id`, its LiveKit URL and
 * a token it minted for the avatar); the session checks the token's claims, resolves the face
 * configuration as /realtime does, passes the URL through the LiveKit address policy
 * (SVC_LIVEKIT_ALLOWED_RANGES), takes a lease of the process's capacity gate, opens the face
 * session and starts a `LiveKitAvatarWorker` in the room. The answer comes once the avatar is
 * in the room and publishing, so the agent learns of any failure from it.
 *
 * A session ends with the room, the agent leaving, its time limit, the face ending or DELETE;
 * the lease goes back then, whatever ended it. Sessions live in this process (as /realtime's):
 * an ended one is kept for `keepEndedMs` so its end reason and figures can be read.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { RealClock } from '../../core/clock.ts';
import type { Registry } from '../../core/registry.ts';
import type { HostResolver } from '../../processors/tools/webhook-target.ts';
import { LiveKitAddressRefused, liveKitAddressPolicy, LiveKitAvatarWorker, resolveLiveKitTarget, type AvatarWorkerEndReason, type LiveKitAvatarWorkerOptions } from '../../transports/livekit/index.ts';
import { RoomError } from '../../transports/webrtc/index.ts';
import type { CapacityGate } from '../capacity/index.ts';
import { ApiError } from '../http/api-error.ts';
import { RealtimeConfigError, type RealtimePrincipal, type ResolvedFaceConfig } from '../realtime/realtime-types.ts';
import { createResolvedFaceOpener } from '../sessions/agent-face.ts';
import type { AvatarSessionMetrics } from './avatar-session-metrics.ts';
import { readAvatarTokenClaims } from './livekit-token-claims.ts';

export const AVATAR_SESSION_DEFAULTS = {
  /** Longest session (an agent that never leaves, a room that never closes); a request may ask for less. */
  maxDurationMs: 60 * 60_000,
  /** How long the agent may take to be in the room once the avatar joined. */
  agentWaitMs: 15_000,
  /** Ended sessions stay readable this long. */
  keepEndedMs: 10 * 60_000,
  /** Retry-After (seconds) of a `server_busy`. */
  retryAfterSeconds: 5,
} as const;

export type AvatarSessionEndReason = Exclude<AvatarWorkerEndReason, 'closed'> | 'deleted' | 'server_shutdown';

export interface AvatarSessionInput {
  readonly config_id: string;
  readonly livekit_url: string;
  readonly livekit_token: string;
  readonly max_duration_s?: number;
}

export interface AvatarSessionsOptions {
  readonly registry: Registry;
  readonly resolveConfig: (principal: RealtimePrincipal, configId: string) => Promise<ResolvedFaceConfig | null>;
  readonly capacity: Pick<CapacityGate, 'tryAcquire' | 'snapshot' | 'limit'>;
  readonly livekitAllowedRanges: readonly string[];
  readonly metrics?: AvatarSessionMetrics;
  readonly logger?: Logger;
  readonly maxDurationMs?: number;
  readonly agentWaitMs?: number;
  readonly keepEndedMs?: number;
  /** Face frames' lateness (ms), fed to the capacity gate and /metrics as the other face sessions' are. */
  readonly onFrameLateness?: (lateMs: number) => void;
  /** Host name resolution for the address policy and the join (tests); CAs for `wss://` (private CAs). */
  readonly resolver?: HostResolver;
  readonly ca?: string | readonly string[];
  /** The worker's media settings where they differ from its defaults (LIVEKIT_AVATAR_WORKER_DEFAULTS): benches compare them. */
  readonly media?: Pick<LiveKitAvatarWorkerOptions, 'audioQueueMs' | 'videoDelayFrames' | 'speechLeadMs' | 'pictureLagMs'>;
}

interface AvatarSession {
  readonly id: string;
  readonly organizationId: string;
  readonly configId: string;
  readonly createdAt: Date;
  readonly receivedAtMs: number;
  /** When the avatar was in the room (the join answered). */
  readonly joinedAtMs: number;
  readonly worker: LiveKitAvatarWorker;
  endedAt: Date | null;
  endReason: AvatarSessionEndReason | null;
  deleting: AvatarSessionEndReason | null;
}

export class AvatarSessions {
  private readonly sessions = new Map<string, AvatarSession>();
  private readonly openFace: ReturnType<typeof createResolvedFaceOpener>;
  private readonly clock = new RealClock();
  private readonly timers = new Set<NodeJS.Timeout>();
  private closing = false;

  constructor(private readonly options: AvatarSessionsOptions) {
    this.openFace = createResolvedFaceOpener(options.registry);
  }

  /** Sessions running now. */
  get live(): number {
    let n = 0;
    for (const s of this.sessions.values()) if (!s.endedAt) n++;
    return n;
  }

  async create(principal: RealtimePrincipal, input: AvatarSessionInput, receivedAtMs = Date.now()): Promise<Record<string, unknown>> {
    if (this.closing) throw this.busy('this server is shutting down');
    const claims = readAvatarTokenClaims(input.livekit_token, Date.now());
    const maxDurationMs = Math.min(this.options.maxDurationMs ?? AVATAR_SESSION_DEFAULTS.maxDurationMs, input.max_duration_s !== undefined ? input.max_duration_s * 1000 : Infinity);
    let resolved: ResolvedFaceConfig | null;
    try {
      resolved = await this.options.resolveConfig(principal, input.config_id);
    } catch (error) {
      if (error instanceof RealtimeConfigError) throw new ApiError('validation_failed', error.message, { reason: error.code, ...error.details });
      throw error;
    }
    if (!resolved) throw new ApiError('model_config_not_found', `no model configuration ${JSON.stringify(input.config_id)} is visible to this API key`, { id: input.config_id });
    try {
      // Checked here as well as at the join (which pins the checked address), to tell the caller
      // why: the policy is decided on the address the caller's own host name resolves to.
      await resolveLiveKitTarget(input.livekit_url, liveKitAddressPolicy(this.options.livekitAllowedRanges), this.options.resolver);
    } catch (error) {
      if (error instanceof LiveKitAddressRefused) throw new ApiError('livekit_url_not_allowed', `livekit_url is refused: ${error.message} (private addresses are reachable only through SVC_LIVEKIT_ALLOWED_RANGES)`);
      throw error;
    }
    const lease = this.options.capacity.tryAcquire(1);
    if (!lease) throw this.busy(this.options.capacity.snapshot().lastRefusal === 'late_frames' ? "this server's live sessions are running late" : `this server runs at most ${this.options.capacity.limit} face sessions`);
    let worker: LiveKitAvatarWorker;
    const id = randomUUID();
    const log = this.options.logger?.child({ avatar_session_id: id });
    try {
      const face = await this.openFace({ faceSlug: resolved.faceSlug, referenceImage: resolved.referenceImage, configuration: resolved.configuration }, this.clock, { maxDimension: undefined });
      const lateness = this.options.onFrameLateness;
      if (lateness) face.frames.subscribe({ next: (f) => lateness(this.clock.now() - face.startedAtMs - f.ptsMs), error: () => undefined });
      const metrics = this.options.metrics;
      worker = await LiveKitAvatarWorker.start({
        url: input.livekit_url,
        token: input.livekit_token,
        livekitAllowedRanges: this.options.livekitAllowedRanges,
        ...(this.options.resolver ? { resolver: this.options.resolver } : {}),
        ...(this.options.ca ? { ca: this.options.ca } : {}),
        agentIdentity: claims.agentIdentity,
        face,
        maxDurationMs,
        agentWaitMs: this.options.agentWaitMs ?? AVATAR_SESSION_DEFAULTS.agentWaitMs,
        ...this.options.media,
        onWarning: (message, details) => log?.warn(details, message),
        onMeasure: (what, value) => {
          if (what === 'first_frame') metrics?.firstFrame((value - receivedAtMs) / 1000);
          else if (what === 'av_offset') metrics?.avOffset(value / 1000);
          else metrics?.clear(value / 1000);
        },
      });
    } catch (error) {
      lease.release();
      if (error instanceof RoomError) {
        log?.warn({ err: (error as { cause?: unknown }).cause ?? error }, 'avatar session could not join its LiveKit room');
        throw new ApiError('livekit_join_failed', 'the avatar could not join the LiveKit room: check livekit_url and that livekit_token is signed by that server for that room');
      }
      throw error;
    }
    const joinedAtMs = Date.now();
    this.options.metrics?.join((joinedAtMs - receivedAtMs) / 1000);
    const session: AvatarSession = { id, organizationId: principal.organizationId, configId: resolved.configId, createdAt: new Date(receivedAtMs), receivedAtMs, joinedAtMs, worker, endedAt: null, endReason: null, deleting: null };
    this.sessions.set(id, session);
    void worker.ended.then((reason) => {
      lease.release();
      session.endedAt = new Date();
      session.endReason = session.deleting ?? (reason === 'closed' ? 'deleted' : reason);
      this.options.metrics?.ended(session.endReason);
      log?.info({ reason: session.endReason }, 'avatar session ended');
      const timer = setTimeout(() => {
        this.timers.delete(timer);
        this.sessions.delete(id);
      }, this.options.keepEndedMs ?? AVATAR_SESSION_DEFAULTS.keepEndedMs);
      timer.unref();
      this.timers.add(timer);
    });
    if (this.closing) await this.end(session, 'server_shutdown');
    return this.view(session);
  }

  /** The session as the API shows it, or undefined (unknown, or another organization's). */
  get(organizationId: string, id: string): Record<string, unknown> | undefined {
    const session = this.sessions.get(id);
    return session && session.organizationId === organizationId ? this.view(session) : undefined;
  }

  /** Ends a session (the avatar leaves the room); resolves with its final view, or undefined as `get`. */
  async delete(organizationId: string, id: string): Promise<Record<string, unknown> | undefined> {
    const session = this.sessions.get(id);
    if (!session || session.organizationId !== organizationId) return undefined;
    await this.end(session, 'deleted');
    return this.view(session);
  }

  /** Ends every session (`server_shutdown`) and refuses new ones. */
  async close(): Promise<void> {
    this.closing = true;
    await Promise.all([...this.sessions.values()].map((s) => this.end(s, 'server_shutdown')));
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
  }

  private async end(session: AvatarSession, reason: AvatarSessionEndReason): Promise<void> {
    // A worker that began to end on its own (the agent left, the room closed, its time limit)
    // keeps its reason: a DELETE during its leave does not relabel it.
    if (!session.endedAt && session.worker.endingReason === null) session.deleting ??= reason;
    await session.worker.close();
    await session.worker.ended;
  }

  private busy(why: string): ApiError {
    const seconds = AVATAR_SESSION_DEFAULTS.retryAfterSeconds;
    return new ApiError('server_busy', `${why}; retry later`, { retry_after_seconds: seconds });
  }

  private view(s: AvatarSession): Record<string, unknown> {
    const w = s.worker;
    const st = w.stats;
    const since = (at: number | null) => (at === null ? null : at - s.receivedAtMs);
    return {
      avatar_session_id: s.id,
      status: s.endedAt ? 'ended' : 'active',
      config_id: s.configId,
      room: w.room,
      avatar_identity: w.identity,
      agent_identity: w.agentIdentity,
      video: { width: w.videoSize.width, height: w.videoSize.height, fps: 25 },
      created_at: s.createdAt.toISOString(),
      ended_at: s.endedAt?.toISOString() ?? null,
      end_reason: s.endReason,
      metrics: {
        // From the request (config, address checks, face opening, the join), as the join histogram.
        join_ms: s.joinedAtMs - s.receivedAtMs,
        first_frame_ms: since(st.firstFrameAtMs),
        first_audio_to_first_speech_frame_ms: st.firstAudioAtMs !== null && st.firstSpeechFrameAtMs !== null ? st.firstSpeechFrameAtMs - st.firstAudioAtMs : null,
        av_offset_ms: st.avOffsetMs,
        audio_underruns: st.audioUnderruns,
        audio_underrun_ms: st.audioUnderrunMs,
        segments: st.segments,
        segments_interrupted: st.segmentsInterrupted,
        clears: st.clears,
        last_clear_ms: st.lastClearMs,
        last_clear_at: st.lastClearAtMs === null ? null : new Date(st.lastClearAtMs).toISOString(),
        streams_refused: st.streamsRefused,
        last_stream_error: st.lastStreamError,
        rpc_failures: st.rpcFailures,
      },
    };
  }
}
