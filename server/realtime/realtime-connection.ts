/**
 * One /realtime connection (realtime-endpoint.ts accepts them): authentication by header (a key in
 * the URL is refused), the configuration, the face session and its capacity lease, the client's
 * messages, frames out over the socket or into a WebRTC room, the set-up deadline and the idle
 * timeout, and the close with its typed error. Protocol: docs/realtime-protocol.md.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { RawData, WebSocket } from 'ws';
import type { Subscription } from 'rxjs';
import type { Clock, TimerHandle } from '../../core/clock.ts';
import { FACE_TIMING, FaceModelError, type FaceModel, type FaceSession } from '../../processors/avatar/face-model.ts';
import {
  CLOSE_CODES,
  ProtocolError,
  REALTIME_LIMITS,
  URL_KEY_PARAMETER_NAMES,
  decodeAudioIn,
  encodeFrameOut,
  parseClientMessage,
  type RealtimeErrorCode,
  type RealtimeLimits,
  type ServerMessage,
  type SessionReadyMessage,
  type WebRTCSettings,
} from '../../protocol/realtime.ts';
import type { CapacityGate, Lease } from '../capacity/capacity-gate.ts';
import { API_KEY_FORMAT } from '../security/api-key-token.ts';
import { RealtimeConfigError, type AvatarPublisher, type RealtimeResolver } from './realtime-types.ts';
import { errorMessage } from '../../core/error-message.ts';

/** The /realtime code of a face model's refusal to open a session. */
const FACE_MODEL_ERROR_CODES: Readonly<Record<string, RealtimeErrorCode>> = {
  invalid_configuration: 'invalid_configuration',
  invalid_image: 'config_reference_not_image',
  no_face_detected: 'config_no_face',
};

export const REALTIME_CONNECTION_LIMITS = {
  /** Non-fatal error answers per second per connection; past it they are dropped (a flood of bad messages must not be answered byte for byte). */
  maxErrorRepliesPerSecond: 10,
} as const;

/**
 * One of our keys anywhere in a string: the `svc_` scheme followed by base64url of at least 16
 * characters (real keys have 43). Matched inside values too (`Bearer svc_...`, `a,svc_...`).
 */
const API_KEY_PATTERN = new RegExp(`${API_KEY_FORMAT.scheme}[A-Za-z0-9_-]{16,}`, 'i');

/**
 * True when the URL carries something that looks like an API key: a parameter under a key-like
 * name (any case), or any parameter name or value in our key format, whatever it is called.
 */
export function urlCarriesApiKey(url: URL): boolean {
  for (const [name, value] of url.searchParams) {
    if (URL_KEY_PARAMETER_NAMES.has(name.toLowerCase())) return true;
    if (API_KEY_PATTERN.test(name) || API_KEY_PATTERN.test(value)) return true;
  }
  return false;
}

function apiKeyOf(req: IncomingMessage): string | undefined {
  const header = req.headers['x-api-key'];
  if (typeof header === 'string' && header) return header;
  const auth = req.headers.authorization;
  if (auth?.startsWith('Bearer ')) return auth.slice(7).trim() || undefined;
  return undefined;
}

export interface ConnectionDeps {
  resolver: RealtimeResolver;
  publishAvatar: AvatarPublisher | undefined;
  livekitAllowedRanges: readonly string[];
  modelFor(slug: string): FaceModel;
  clock: Clock;
  maxBuffered: number;
  hardMaxBuffered: number;
  gate: CapacityGate;
  limits: RealtimeLimits;
  setupTimeoutMs: number;
  live: Set<RealtimeConnection>;
  refused(code: RealtimeErrorCode): void;
  log(event: string, details: Record<string, unknown>): void;
  onFrameLateness: ((lateMs: number) => void) | undefined;
}

export class RealtimeConnection {
  private session: FaceSession | undefined;
  private frames: Subscription | undefined;
  private readonly sessionId = randomUUID();
  private closed = false;
  private ready = false;
  private queuedAudioMs = 0;
  private controlWindowStart = 0;
  private controlCount = 0;
  private errorWindowStart = 0;
  private errorReplies = 0;
  /** The face session's turn numbering (1, 2, ...), mirrored: start_turn opens one, audio outside an open turn opens one implicitly. */
  private turnId = 0;
  private turnOpen = false;
  private idleTimer: TimerHandle | undefined;
  private lastMessageAt: number;
  private readonly openedAt: number;
  /** Set once frames go to a WebRTC room instead of this socket. */
  private publication: { close(): void | Promise<void> } | undefined;
  /** A `webrtc` request is being published (set before its first await). */
  private publishing = false;
  /** This session's share of the process's capacity. */
  private lease: Lease | undefined;
  private stopWatchingKey: (() => void) | undefined;
  /** The requested config_id, for the log lines of refusals. */
  private configId: string | undefined;

  constructor(
    private readonly ws: WebSocket,
    private readonly req: IncomingMessage,
    private readonly url: URL,
    private readonly deps: ConnectionDeps,
  ) {
    this.lastMessageAt = deps.clock.now();
    this.openedAt = this.lastMessageAt;
    ws.on('message', (data, isBinary) => this.onMessage(data, isBinary));
    this.armIdleTimer();
    ws.on('close', () => this.shutdown('client closed'));
    ws.on('error', (err) => {
      this.deps.log('realtime.socket_error', { session_id: this.sessionId, error: err.message });
      this.shutdown('socket error');
    });
  }

  async open(): Promise<void> {
    try {
      if (urlCarriesApiKey(this.url)) {
        return this.fail('auth_failed', 'API keys are never accepted in the URL; send the X-API-Key header (or Authorization: Bearer)');
      }
      const apiKey = apiKeyOf(this.req);
      if (!apiKey) return this.fail('auth_failed', 'missing API key: send the X-API-Key header');
      const principal = await this.deps.resolver.authenticate(apiKey);
      if (!principal) return this.fail('auth_failed', 'invalid API key');
      if (this.closed) return;
      this.stopWatchingKey = this.deps.resolver.watchRevocation?.(principal, () => {
        this.deps.log('realtime.key_revoked', { session_id: this.sessionId, principal: principal.principal });
        this.fail('auth_failed', 'the API key of this session was revoked');
      });
      const configId = this.url.searchParams.get('config_id');
      if (!configId) return this.fail('unknown_config', 'missing config_id query parameter');
      this.configId = configId;
      const resolved = await this.deps.resolver.resolveConfig(principal, configId);
      if (!resolved) return this.fail('unknown_config', `no model configuration ${JSON.stringify(configId)} is visible to this API key`);
      if (this.closed) return;
      const lease = this.deps.gate.tryAcquire(1);
      if (!lease) {
        const why = this.deps.gate.snapshot().lastRefusal === 'late_frames' ? "this server's live sessions are running late" : `this server runs at most ${this.deps.gate.limit} face sessions`;
        return this.fail('server_busy', `${why}; retry later`);
      }
      this.lease = lease;
      this.deps.live.add(this);
      const model = this.deps.modelFor(resolved.faceSlug);
      const session = await model.openSession({ referenceImage: resolved.referenceImage, configuration: resolved.configuration, imageFormat: 'jpeg' }, this.deps.clock);
      if (this.closed) {
        session.close();
        return;
      }
      this.session = session;
      const frameLateness = this.deps.onFrameLateness;
      this.frames = session.frames.subscribe({
        next: (f) => {
          // Frames are emitted synchronously to subscribers: now is when this one left the session.
          frameLateness?.(this.deps.clock.now() - session.startedAtMs - f.ptsMs);
          if (f.type === 'speech' || f.type === 'speech-start') this.queuedAudioMs = Math.max(0, this.queuedAudioMs - FACE_TIMING.frameDurationMs);
          if (this.ws.readyState !== this.ws.OPEN || this.publication) return;
          if (this.overflowing()) return;
          // Audio always goes out; under backpressure the image is skipped, never the sound.
          const congested = this.ws.bufferedAmount > this.deps.maxBuffered;
          this.ws.send(
            encodeFrameOut({
              type: f.type,
              final: f.final,
              index: f.index,
              ptsMs: f.ptsMs,
              turnId: f.turnId,
              width: f.image.width,
              height: f.image.height,
              imageFormat: f.image.format === 'rgb' ? 'rgb' : 'jpeg',
              image: congested ? undefined : f.image.data,
              audio: f.audio,
            }),
          );
        },
        error: (err: unknown) => {
          this.deps.log('realtime.session_failed', { session_id: this.sessionId, error: errorMessage(err) });
          this.fail('internal_error', 'the face session failed');
        },
        complete: () => this.endGracefully('session ended'),
      });
      const ready: SessionReadyMessage = {
        type: 'session_ready',
        session_id: this.sessionId,
        config_id: resolved.configId,
        model_variant_id: resolved.modelVariantId,
        width: session.width,
        height: session.height,
        fps: FACE_TIMING.framesPerSecond,
        audio_in: { sample_rate: FACE_TIMING.audioSampleRate, channels: 1, format: 's16le' },
        audio_out: { sample_rate: FACE_TIMING.audioSampleRate, channels: 1, format: 's16le', samples_per_frame: FACE_TIMING.samplesPerFrame },
        video: { format: session.imageFormat === 'rgb' ? 'rgb' : 'jpeg' }, // opened as jpeg above
        limits: this.deps.limits,
        protocol_version: 1,
      };
      this.send(ready);
      this.ready = true;
      // The client's silence counts from here: the time this server took to open the session
      // (authentication, the configuration, the face) is not the client's to answer for.
      this.lastMessageAt = Math.max(this.lastMessageAt, this.deps.clock.now());
      this.deps.log('realtime.session_ready', { session_id: this.sessionId, principal: principal.principal, config_id: resolved.configId });
    } catch (err) {
      if (err instanceof RealtimeConfigError) return this.refuseConfig(err.code, err.message, err.details);
      if (err instanceof FaceModelError && FACE_MODEL_ERROR_CODES[err.code]) {
        return this.refuseConfig(FACE_MODEL_ERROR_CODES[err.code]!, err.message, { face_model_error: err.code });
      }
      this.deps.log('realtime.open_failed', { session_id: this.sessionId, config_id: this.configId, error: errorMessage(err) });
      this.fail('internal_error', 'the face session could not be opened');
    }
  }

  /** A configuration that cannot run: logged (with what is wrong), then the typed fatal error. */
  private refuseConfig(code: RealtimeErrorCode, message: string, details: Record<string, unknown>): void {
    this.deps.log('realtime.config_refused', { session_id: this.sessionId, config_id: this.configId, code, message, ...details });
    this.fail(code, message);
  }

  /**
   * One timer per connection, re-armed lazily: messages only record their time. An expiry is
   * confirmed after one more pass of the event loop's I/O phase: after a stall (a busy process),
   * timers run before the sockets are read, and pings already waiting there must count.
   */
  private armIdleTimer(confirming = false): void {
    if (this.closed) return;
    const ms = this.deps.limits.idleTimeoutMs;
    // Before session_ready the client waits for us: its silence is not counted; the set-up has
    // its own deadline (setupTimeoutMs, counted from the connection).
    if (!this.ready) {
      const setupLeft = this.openedAt + this.deps.setupTimeoutMs - this.deps.clock.now();
      if (setupLeft <= 0) {
        this.deps.log('realtime.setup_timeout', { session_id: this.sessionId, config_id: this.configId, timeout_ms: this.deps.setupTimeoutMs });
        return this.fail('internal_error', `the session could not be set up within ${this.deps.setupTimeoutMs} ms`);
      }
      this.idleTimer = this.deps.clock.setTimeout(() => this.armIdleTimer(), Math.min(ms, setupLeft));
      return;
    }
    const left = this.lastMessageAt + ms - this.deps.clock.now();
    if (left <= 0) {
      if (!confirming) {
        setImmediate(() => this.armIdleTimer(true));
        return;
      }
      return this.fail('idle_timeout', `no message from the client for ${ms} ms; send ping to keep an idle session open`);
    }
    this.idleTimer = this.deps.clock.setTimeout(() => this.armIdleTimer(), left);
  }

  private onMessage(data: RawData, isBinary: boolean): void {
    this.lastMessageAt = this.deps.clock.now();
    try {
      const bytes = toBytes(data);
      if (bytes.byteLength > REALTIME_LIMITS.maxMessageBytes) throw new ProtocolError('frame_too_large', `message of ${bytes.byteLength} bytes exceeds the ${REALTIME_LIMITS.maxMessageBytes}-byte limit`);
      if (isBinary) this.onAudio(bytes);
      else this.onControl(Buffer.from(bytes).toString('utf8'));
    } catch (err) {
      if (err instanceof ProtocolError) this.error(err.code, err.message, false);
      else {
        this.deps.log('realtime.message_failed', { session_id: this.sessionId, error: errorMessage(err) });
        this.error('internal_error', 'the message could not be processed', false);
      }
    }
  }

  private onAudio(bytes: Uint8Array): void {
    const message = decodeAudioIn(bytes);
    const session = this.session;
    if (!session) throw new ProtocolError('not_ready', 'audio sent before session_ready was received; it was dropped');
    const ms = (message.pcm.length / FACE_TIMING.audioSampleRate) * 1000;
    if (this.queuedAudioMs + ms > REALTIME_LIMITS.maxQueuedAudioMs) {
      throw new ProtocolError('rate_limited', `more than ${REALTIME_LIMITS.maxQueuedAudioMs} ms of audio queued ahead of playback; this chunk was dropped`);
    }
    this.queuedAudioMs += ms;
    if (message.pcm.length) {
      if (!this.turnOpen) this.openTurn();
      session.pushAudio(message.pcm);
    }
    if (message.endOfTurn) {
      this.turnOpen = false;
      session.endTurn();
    }
  }

  private onControl(text: string): void {
    const now = this.deps.clock.now();
    if (now - this.controlWindowStart >= 1000) {
      this.controlWindowStart = now;
      this.controlCount = 0;
    }
    if (++this.controlCount > REALTIME_LIMITS.maxControlMessagesPerSecond) {
      throw new ProtocolError('rate_limited', `more than ${REALTIME_LIMITS.maxControlMessagesPerSecond} control messages per second; message dropped`);
    }
    const message = parseClientMessage(text);
    if (message.type === 'ping') return this.send({ type: 'pong', t: typeof message.t === 'number' ? message.t : now });
    const session = this.session;
    if (!session) throw new ProtocolError('not_ready', `"${message.type}" sent before session_ready; ignored`);
    switch (message.type) {
      case 'webrtc':
        void this.startWebRTC(session, message.settings);
        return;
      case 'start_turn':
        session.startTurn();
        this.send({ type: 'turn_started', turn_id: this.openTurn() });
        return;
      case 'end_turn':
        this.turnOpen = false;
        session.endTurn();
        return;
      case 'cancel': {
        const hadSpeech = session.cancel();
        this.queuedAudioMs = 0;
        this.turnOpen = false;
        this.send({ type: 'turn_cancelled', turn_id: this.turnId || null, had_speech: hadSpeech });
        return;
      }
      case 'end':
        this.turnOpen = false;
        session.end().catch((err: unknown) => {
          this.deps.log('realtime.end_failed', { session_id: this.sessionId, error: errorMessage(err) });
          this.fail('internal_error', 'the face session could not finish');
        });
        return;
    }
  }

  private openTurn(): number {
    this.turnOpen = true;
    return ++this.turnId;
  }

  private async startWebRTC(session: FaceSession, settings: WebRTCSettings): Promise<void> {
    // Publishing counts from the request, not from its answer: a second `webrtc` sent while the
    // first still joins (a LiveKit join takes a while) would otherwise start a second
    // publication, with its own encoders, that nothing closes.
    if (this.publication || this.publishing) return this.error('webrtc_failed', 'this session already publishes to a room', false);
    if (!this.deps.publishAvatar) return this.error('webrtc_failed', 'direct WebRTC is not available on this server', false);
    this.publishing = true;
    try {
      const published = await this.deps.publishAvatar(session.frames, settings, { livekitAllowedRanges: this.deps.livekitAllowedRanges, videoSize: { width: session.width, height: session.height } });
      if (this.closed) {
        // Never a rejection left unhandled (it would take the process down).
        await Promise.resolve().then(() => published.close()).catch((err: unknown) => this.deps.log('realtime.unpublish_failed', { session_id: this.sessionId, error: errorMessage(err) }));
        return;
      }
      this.publication = published;
      this.send({ type: 'webrtc_connected', participant_id: published.participantId, room: published.room });
      // The room may end first (closed, deleted, the connection to it lost): the session then
      // sends its frames over this socket again, and the client is told, instead of holding a
      // session (and its slot) that shows nothing anywhere.
      const ended = () => {
        if (this.closed || this.publication !== published) return;
        this.publication = undefined;
        this.deps.log('realtime.webrtc_ended', { session_id: this.sessionId, room: published.room });
        this.error('webrtc_failed', 'the room publication ended (the room closed, or the connection to it was lost); frames come over this socket again', false);
      };
      published.ended?.then(ended, ended);
    } catch (err) {
      // The client sees the publisher's message (neutral for LiveKit: no network detail); the cause goes to the log.
      const cause = err instanceof Error && err.cause !== undefined ? err.cause : undefined;
      this.deps.log('realtime.webrtc_failed', { session_id: this.sessionId, error: errorMessage(err), cause: cause instanceof Error ? cause.message : cause === undefined ? undefined : String(cause) });
      this.error('webrtc_failed', `could not publish to the room: ${errorMessage(err)}`, false);
    } finally {
      this.publishing = false;
    }
  }

  private send(message: ServerMessage): void {
    if (this.ws.readyState === this.ws.OPEN && !this.overflowing()) this.ws.send(JSON.stringify(message));
  }

  private error(code: RealtimeErrorCode, message: string, fatal: boolean): void {
    if (!fatal) {
      // A flood of bad messages is answered a few times a second, not once per message.
      const now = this.deps.clock.now();
      if (now - this.errorWindowStart >= 1000) {
        this.errorWindowStart = now;
        this.errorReplies = 0;
      }
      if (++this.errorReplies > REALTIME_CONNECTION_LIMITS.maxErrorRepliesPerSecond) return;
    }
    this.send({ type: 'error', code, message, fatal });
  }

  /**
   * The client is not reading: more than `hardMaxBuffered` bytes wait in its socket. The
   * connection is ended at once (`slow_consumer`; nothing more can reach such a client anyway),
   * its session closed and its slot freed. True when it was (or is now) ended for that.
   */
  private overflowing(): boolean {
    if (this.ws.bufferedAmount <= this.deps.hardMaxBuffered) return false;
    if (!this.closed) {
      this.deps.log('realtime.slow_consumer', { session_id: this.sessionId, buffered_bytes: this.ws.bufferedAmount });
      if (!this.ready) this.deps.refused('slow_consumer');
      this.ws.terminate();
      this.shutdown('slow_consumer');
    }
    return true;
  }

  private fail(code: RealtimeErrorCode, message: string): void {
    if (!this.ready && !this.closed) this.deps.refused(code);
    this.error(code, message, true);
    this.ws.close(CLOSE_CODES[code] ?? 1008, code);
    this.shutdown(code);
  }

  private endGracefully(reason: string): void {
    this.send({ type: 'session_ended', reason });
    if (this.ws.readyState === this.ws.OPEN) this.ws.close(1000, 'session ended');
    this.shutdown(reason);
  }

  shutdown(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.deps.live.delete(this);
    this.lease?.release();
    this.stopWatchingKey?.();
    this.deps.clock.clearTimeout(this.idleTimer);
    this.frames?.unsubscribe();
    // Teardown never throws into the socket's event handlers (that would take the process down).
    const publication = this.publication;
    if (publication) Promise.resolve().then(() => publication.close()).catch((err: unknown) => this.deps.log('realtime.unpublish_failed', { session_id: this.sessionId, error: String(err) }));
    try {
      this.session?.close();
    } catch (err) {
      this.deps.log('realtime.close_failed', { session_id: this.sessionId, error: errorMessage(err) });
    }
    if (this.ws.readyState === this.ws.OPEN) this.ws.close(1001, reason.slice(0, 100));
  }
}

function toBytes(data: RawData): Uint8Array {
  if (Array.isArray(data)) return new Uint8Array(Buffer.concat(data));
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}
