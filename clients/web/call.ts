/**
 * One call of the widget, from the start click to its end: microphone, the Session API connect
 * request (with the bounded queue on 429), the room (transport.ts: the embedded room, bundled, or
 * a LiveKit room, loaded on demand), the bot's session messages turned into DOM events
 * (bot-messages.ts for the plain ones), the setup timeout, and the release of the session.
 * Levels, the browser's voice activity and per-turn latency are measured by its CallMeter
 * (call-meter.ts). The element (element.ts) owns the view and the event target; a
 * Call is used once.
 */
import { SESSION_PROTOCOL_VERSION } from '../../protocol/session-messages.ts';
import {
  OUTCOMES,
  type ConnectionState,
  type ConnectionTimingReportDetail,
  type FaultDomain,
  type Outcome,
  type OutcomePhase,
  type SessionOutcomeDetail,
  type WidgetBotState,
  type WindowEventName,
} from './events.ts';
import { dispatchBotEvent, outcomeForEnding } from './bot-messages.ts';
import { CallMeter } from './call-meter.ts';
import { joinEmbeddedRoom } from './embedded-transport.ts';
import { loadLiveKit } from './livekit-loader.ts';
import { JoinFailure, roomKind, roomNameOf, type JoinRoom, type RoomTransport } from './transport.ts';
import { WIDGET_VERSION } from './version.ts';

export const CALL_DEFAULTS = {
  /** Setup timeout (attribute `connect-timeout`, seconds): connect request -> ready. Paused while queued. */
  setupTimeoutMs: 20_000,
  /** Longest total wait in the queue (attribute `queue-timeout`, seconds) before giving up. */
  queueTimeoutMs: 120_000,
  /** Wait between queued retries when the server names none; server values are clamped to 1..30 s. */
  defaultRetryAfterS: 5,
  minRetryAfterS: 1,
  maxRetryAfterS: 30,
  /** ICE `disconnected` (LiveKit: reconnecting) for this long ends the call (`transport_lost`); `failed` ends it at once. */
  iceDisconnectGraceMs: 8_000,
  // Levels, browser voice activity and per-turn latency: METER_DEFAULTS (call-meter.ts).
} as const;

const SPEECH_CONSTRAINTS: MediaTrackConstraints = { echoCancellation: true, noiseSuppression: true, autoGainControl: true };

export interface CallSettings {
  readonly endpoint: string;
  readonly agentId: string;
  readonly instanceId: string;
  readonly clientUserRef: string | null;
  readonly authToken: string | null;
  readonly setupTimeoutMs: number;
  readonly queueTimeoutMs: number;
  readonly scriptStart: number;
  readonly startClicked: number;
}

/** What a call needs from its element. */
export interface CallHost {
  readonly video: HTMLVideoElement;
  readonly audio: HTMLAudioElement;
  readonly audioContext: AudioContext | null;
  readonly muted: boolean;
  readonly connectionState: ConnectionState;
  readonly botState: WidgetBotState;
  dispatch(name: string, detail: unknown): void;
  dispatchOnWindow(name: WindowEventName, detail: unknown): void;
  setConnectionState(state: ConnectionState): void;
  setBotState(state: WidgetBotState): void;
  setQueuing(queuing: boolean): void;
  setMicrophonePending(pending: boolean): void;
  setBotSpeaking(speaking: boolean): void;
  /** The browser refused to play the bot's sound (no user gesture): the element offers a button. */
  setSoundBlocked(blocked: boolean): void;
  showVideo(): void;
  callEnded(call: Call, end: CallEnd): void;
}

export interface CallEnd {
  readonly outcome: Outcome;
  readonly phase: OutcomePhase;
  readonly faultDomain: FaultDomain;
}

/** Why the visitor's side ends a call. */
export type LocalEnd = 'visitor' | 'element_removed' | 'page_closed';

interface SessionGrant {
  readonly session_id: string;
  readonly room_url: string;
  readonly token: string;
}

class CallFailure extends Error {
  constructor(
    readonly outcome: Outcome,
    readonly faultDomain: FaultDomain = OUTCOMES[outcome],
  ) {
    super(outcome);
  }
}

const isString = (v: unknown): v is string => typeof v === 'string';
const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);
const round = (v: number) => Math.round(v * 10) / 10;
const since = (a: number | null, b: number | null) => (a === null || b === null ? null : round(b - a));
const offline = () => typeof navigator !== 'undefined' && navigator.onLine === false;

export class Call {
  private phase: OutcomePhase | 'done' = 'connect';
  sessionId: string | null = null;
  private roomName: string | null = null;
  private room: RoomTransport | null = null;
  private roomClosedReason: string | null = null;
  private sessionEndedReason: string | null = null;
  private fatalBotError = false;
  private httpStatus: number | null = null;
  private mic: MediaStream | null = null;
  private readonly abort = new AbortController();
  private readonly timers = new Set<ReturnType<typeof setTimeout>>();
  private setupTimer: ReturnType<typeof setTimeout> | null = null;
  private iceTimer: ReturnType<typeof setTimeout> | null = null;
  private queuing = false;
  private queuedSince = 0;
  private queuedMs = 0;
  private connectAttempts = 0;
  private readyAt = 0;
  private botReady = false;
  private iceConnected = false;
  /** The media path was `disconnected` (within the grace): `client-ready` is sent again when it recovers. */
  private recovering = false;
  private firstFrame = false;
  private videoExpected = true;
  private audioAttached = false;
  private clientReadySent = false;
  private botSpeaking = false;
  private readonly marks = {
    microphoneReady: null as number | null,
    connectRequest: null as number | null,
    connectResponse: null as number | null,
    signallingJoined: null as number | null,
    iceConnected: null as number | null,
    firstVideoFrame: null as number | null,
    botReady: null as number | null,
  };
  /** Levels, browser voice activity and per-turn latency (call-meter.ts). */
  private readonly meter: CallMeter;

  constructor(
    private readonly host: CallHost,
    private readonly settings: CallSettings,
  ) {
    const call = this;
    this.meter = new CallMeter({
      get audioContext() { return host.audioContext; },
      get muted() { return host.muted; },
      get live() { return call.live; },
      get ended() { return call.ended; },
      get sessionId() { return call.sessionId; },
      agentId: settings.agentId,
      instanceId: settings.instanceId,
      dispatch: (name, detail) => host.dispatch(name, detail),
      dispatchOnWindow: (name, detail) => host.dispatchOnWindow(name, detail),
    });
  }

  get live(): boolean {
    return this.phase === 'session';
  }

  get ended(): boolean {
    return this.phase === 'done';
  }

  /** Runs the setup; never throws (every failure ends the call with its outcome). */
  async run(): Promise<void> {
    try {
      this.checkSupport();
      // A missing agent-id or core-api-endpoint is the embedder's mistake: nothing is asked of the visitor.
      if (!this.settings.agentId || !this.settings.endpoint) throw new CallFailure('agent_unavailable');
      this.host.setBotState('initializing');
      this.host.setConnectionState('requesting');
      await this.openMicrophone();
      const grant = await this.requestSession();
      await this.joinRoom(grant);
    } catch (err) {
      if (this.phase === 'done') return;
      if (err instanceof CallFailure) this.finish(err.outcome, { faultDomain: err.faultDomain });
      else {
        console.error('svc-agent: unexpected error', err);
        this.finish('connection_failed');
      }
    }
  }

  /** The visitor's side ends the call (hang-up button, element removed, tab closed). */
  end(reason: LocalEnd): void {
    if (this.phase === 'done') return;
    const outcome: Outcome = reason === 'visitor' ? (this.phase === 'session' ? 'ended_by_visitor' : 'cancelled') : reason;
    this.finish(outcome, { release: reason === 'page_closed' ? 'beacon' : 'fetch', hangUp: true });
  }

  setMuted(muted: boolean): void {
    for (const track of this.mic?.getAudioTracks() ?? []) track.enabled = !muted;
  }

  /** Sends `append-system-context`; false when no room is joined (or the call ended). */
  appendSystemContext(text: string): boolean {
    if (!this.room || this.phase === 'done') return false;
    return this.sendToBot({ type: 'append-system-context', text });
  }

  // ---- setup ------------------------------------------------------------------------------

  private checkSupport(): void {
    const ok = typeof RTCPeerConnection === 'function' && typeof WebSocket === 'function' && !!navigator.mediaDevices?.getUserMedia;
    if (!ok) throw new CallFailure('unsupported_browser');
  }

  private async openMicrophone(): Promise<void> {
    this.host.setMicrophonePending(true);
    let stream: MediaStream;
    try {
      stream = await navigator.mediaDevices.getUserMedia({ audio: SPEECH_CONSTRAINTS, video: false });
    } catch (err) {
      const name = (err as { name?: string })?.name;
      throw new CallFailure(name === 'NotAllowedError' || name === 'SecurityError' || name === 'PermissionDeniedError' ? 'mic_permission_denied' : 'mic_unavailable');
    } finally {
      this.host.setMicrophonePending(false);
    }
    if (this.phase === 'done') {
      for (const track of stream.getTracks()) track.stop();
      return;
    }
    this.mic = stream;
    this.setMuted(this.host.muted);
    this.marks.microphoneReady = performance.now();
  }

  private armSetupTimer(): void {
    if (this.setupTimer !== null) return;
    this.setupTimer = setTimeout(() => this.onSetupTimeout(), this.settings.setupTimeoutMs);
  }

  private disarmSetupTimer(): void {
    if (this.setupTimer !== null) clearTimeout(this.setupTimer);
    this.setupTimer = null;
  }

  private onSetupTimeout(): void {
    this.setupTimer = null;
    if (this.phase !== 'connect') return;
    const connectionState = this.host.connectionState;
    this.host.dispatch('ConnectionTimeout', {
      duration_s: this.settings.setupTimeoutMs / 1000,
      bot_state: this.host.botState,
      connection_state: connectionState,
    });
    // requesting: the service did not answer; connected: the bot never became ready; connecting: the network path (ICE).
    this.finish('connection_timeout', { faultDomain: connectionState === 'connecting' ? (offline() ? 'client_env' : 'unknown') : 'ojin', hangUp: true });
  }

  private async requestSession(): Promise<SessionGrant> {
    const { endpoint, agentId, clientUserRef, authToken, queueTimeoutMs } = this.settings;
    const body = JSON.stringify({ agent_id: agentId, ...(clientUserRef ? { client_user_ref: clientUserRef } : {}), ...(authToken ? { auth_token: authToken } : {}) });
    for (;;) {
      if (this.phase === 'done') throw new CallFailure('cancelled');
      this.armSetupTimer();
      this.connectAttempts++;
      this.marks.connectRequest = performance.now();
      let response: Response;
      // Not aborted when the call ends meanwhile (hang-up, setup timeout): the server may admit
      // the session anyway, and only the response names the room to release.
      try {
        response = await fetch(`${endpoint}/v1/public/agents/connect`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body, credentials: 'omit' });
      } catch {
        throw new CallFailure('network_error', offline() ? 'client_env' : 'unknown');
      }
      const data = (await response.json().catch(() => null)) as Record<string, unknown> | null;
      if (this.ended) {
        const late = response.ok && data && isString(data.room_url) && isString(data.token) ? roomNameOf({ room_url: data.room_url, token: data.token }) : null;
        if (late) this.release(late, 'fetch');
        throw new CallFailure('cancelled');
      }
      this.httpStatus = response.status;
      if (response.ok) {
        this.marks.connectResponse = performance.now();
        if (this.queuing) this.leaveQueue();
        if (!data || !isString(data.session_id) || !isString(data.room_url) || !isString(data.token)) throw new CallFailure('service_error');
        return data as unknown as SessionGrant;
      }
      const code = data && isString(data.error_code) ? data.error_code : '';
      if ((response.status === 429 && code === 'concurrency_limit') || (response.status === 503 && code === 'server_busy')) {
        await this.waitInQueue(response, data, queueTimeoutMs, code === 'server_busy' ? 'ojin' : 'backend');
        continue;
      }
      if (code === 'agent_not_found' || code === 'agent_unpublished' || response.status === 404) throw new CallFailure('agent_unavailable');
      if (code === 'auth_failed' || response.status === 403) throw new CallFailure('not_allowed');
      throw new CallFailure('service_error');
    }
  }

  private async waitInQueue(response: Response, data: Record<string, unknown> | null, queueTimeoutMs: number, domain: FaultDomain): Promise<void> {
    this.disarmSetupTimer();
    const now = performance.now();
    if (!this.queuing) {
      this.queuing = true;
      this.queuedSince = now;
      this.host.setQueuing(true);
    }
    const header = Number(response.headers.get('retry-after'));
    const named = num(data?.retry_after_seconds) ?? (Number.isFinite(header) && header > 0 ? header : null);
    const waitS = Math.min(CALL_DEFAULTS.maxRetryAfterS, Math.max(CALL_DEFAULTS.minRetryAfterS, named ?? CALL_DEFAULTS.defaultRetryAfterS));
    if (now - this.queuedSince + waitS * 1000 > queueTimeoutMs) throw new CallFailure('queue_timeout', domain);
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.timers.delete(timer);
        resolve();
      }, waitS * 1000);
      this.timers.add(timer);
      this.abort.signal.addEventListener('abort', () => resolve(), { once: true });
    });
  }

  private leaveQueue(): void {
    this.queuedMs += performance.now() - this.queuedSince;
    this.queuing = false;
    this.host.setQueuing(false);
  }

  private async joinRoom(grant: SessionGrant): Promise<void> {
    this.sessionId = grant.session_id;
    const kind = roomKind(grant.room_url);
    this.roomName = roomNameOf(grant);
    if (!kind || !this.roomName) throw new CallFailure('service_error');
    this.host.setConnectionState('connecting');
    let join: JoinRoom = joinEmbeddedRoom;
    if (kind === 'livekit') {
      try {
        join = await loadLiveKit(this.settings.endpoint);
      } catch {
        throw new CallFailure('connection_failed', offline() ? 'client_env' : 'ojin');
      }
      if (this.phase === 'done') return;
    }
    let room: RoomTransport;
    try {
      const microphone = this.mic?.getAudioTracks()[0];
      room = await join({
        url: grant.room_url,
        token: grant.token,
        ...(microphone ? { microphone } : {}),
        signal: this.abort.signal,
        handlers: {
          track: (track) => this.attachTrack(track),
          peerState: (state) => this.onPeerState(state),
          message: (message) => this.onBotMessage(message),
          closed: (reason) => {
            this.roomClosedReason = reason;
          },
          disconnected: () => this.onSignallingClosed(),
        },
      });
    } catch (err) {
      const network = err instanceof JoinFailure && err.why === 'network';
      throw new CallFailure('connection_failed', network ? (offline() ? 'client_env' : 'unknown') : 'ojin');
    }
    if (this.phase === 'done') {
      room.leave();
      return;
    }
    this.room = room;
    this.marks.signallingJoined = performance.now();
    this.meter.start(this.mic);
  }

  private attachTrack(track: MediaStreamTrack): void {
    if (this.phase === 'done') return;
    const { video, audio } = this.host;
    if (track.kind === 'video') {
      video.srcObject = new MediaStream([track]);
      void video.play().catch(() => undefined);
      const first = () => this.onFirstFrame();
      if (typeof video.requestVideoFrameCallback === 'function') video.requestVideoFrameCallback(first);
      video.addEventListener('loadeddata', first, { once: true });
    } else if (track.kind === 'audio') {
      // The bot's sound plays from the peer connection through a media element: the only path
      // browsers' echo cancellation removes from the microphone (Web Audio playback is not).
      audio.srcObject = new MediaStream([track]);
      audio.muted = false;
      const play = () =>
        void audio.play().then(
          () => this.phase !== 'done' && this.host.setSoundBlocked(false),
          (err: unknown) => {
            if ((err as { name?: string })?.name === 'NotAllowedError' && this.phase !== 'done') this.host.setSoundBlocked(true);
          },
        );
      play();
      audio.addEventListener('canplay', play, { once: true });
      this.audioAttached = true;
      this.meter.analyseBot(track);
      this.maybeClientReady();
    }
  }

  private onFirstFrame(): void {
    if (this.firstFrame || this.phase === 'done') return;
    this.firstFrame = true;
    this.marks.firstVideoFrame = performance.now();
    this.host.showVideo();
    this.maybeReady();
  }

  private onPeerState(state: 'connected' | 'disconnected' | 'failed'): void {
    if (this.phase === 'done') return;
    if (state === 'connected') {
      if (this.iceTimer !== null) clearTimeout(this.iceTimer);
      this.iceTimer = null;
      if (!this.iceConnected) {
        this.iceConnected = true;
        this.marks.iceConnected = performance.now();
        this.host.setConnectionState('connected');
      }
      // After a recovery (LiveKit may have rejoined as a new participant) the bot is told again;
      // it answers with its current state and changes nothing else (docs/session-messages.md).
      if (this.recovering) this.clientReadySent = false;
      this.recovering = false;
      this.maybeClientReady();
      this.maybeReady();
    } else if (state === 'disconnected') {
      this.recovering = this.iceConnected;
      if (this.iceTimer === null) this.iceTimer = setTimeout(() => this.onTransportLost(), CALL_DEFAULTS.iceDisconnectGraceMs);
    } else if (state === 'failed') {
      this.onTransportLost();
    }
  }

  private onTransportLost(): void {
    if (this.phase === 'done') return;
    const domain: FaultDomain = offline() ? 'client_env' : 'unknown';
    this.finish(this.phase === 'session' ? 'transport_lost' : 'connection_failed', { faultDomain: domain, hangUp: true });
  }

  private onSignallingClosed(): void {
    if (this.phase === 'done') return;
    if (this.sessionEndedReason !== null) this.finish(outcomeForEnding(this.sessionEndedReason), { release: 'none' });
    else if (this.roomClosedReason !== null) {
      const shutdown = /shut/i.test(this.roomClosedReason);
      this.finish(shutdown ? 'service_shutdown' : this.fatalBotError ? 'agent_error' : 'ended_by_agent', { release: 'none' });
    } else this.onTransportLost();
  }

  /** client-ready tells the bot the page can play its media: it waits for ICE and the audio track, so the greeting is not cut. */
  private maybeClientReady(): void {
    if (this.clientReadySent || !this.iceConnected || !this.audioAttached) return;
    this.clientReadySent = true;
    this.sendToBot({
      type: 'client-ready',
      version: SESSION_PROTOCOL_VERSION,
      about: { library: 'svc-agent', library_version: WIDGET_VERSION, platform: 'web', user_agent: navigator.userAgent },
    });
  }

  private maybeReady(): void {
    if (this.phase !== 'connect' || !this.botReady || !this.iceConnected || (this.videoExpected && !this.firstFrame)) return;
    this.phase = 'session';
    this.readyAt = performance.now();
    this.disarmSetupTimer();
    this.host.setConnectionState('ready');
    this.emitOutcome('success', 'connect', 'unknown');
    this.emitTimingReport();
  }

  private sendToBot(message: Record<string, unknown>): boolean {
    return this.room?.send(message) ?? false;
  }

  // ---- bot messages -----------------------------------------------------------------------

  private onBotMessage(m: Record<string, unknown>): void {
    if (this.phase === 'done' || !m || typeof m !== 'object') return;
    const d = (name: string, detail: unknown) => this.host.dispatch(name, detail);
    switch (m.type) {
      case 'bot-ready': {
        this.botReady = true;
        this.marks.botReady ??= performance.now();
        const caps = m.capabilities as { video_out?: unknown } | undefined;
        this.videoExpected = caps?.video_out !== false;
        this.maybeReady();
        break;
      }
      case 'bot-state':
        if (m.state === 'listening' || m.state === 'thinking' || m.state === 'speaking' || m.state === 'initializing' || m.state === 'ended') this.host.setBotState(m.state);
        break;
      case 'user-started-speaking':
        this.meter.userStarted();
        d('UserStartedSpeaking', null);
        break;
      case 'user-stopped-speaking':
        this.meter.userStopped();
        d('UserStoppedSpeaking', null);
        break;
      case 'bot-started-speaking':
      case 'bot-stopped-speaking':
        this.setBotSpeaking(m.type === 'bot-started-speaking');
        break;
      case 'latency-report':
        this.meter.latencyReport(m);
        break;
      case 'session-ended':
        this.sessionEndedReason = isString(m.reason) ? m.reason : '';
        this.finish(outcomeForEnding(this.sessionEndedReason), { release: 'none' });
        break;
      case 'error':
        if (m.fatal === true) this.fatalBotError = true;
        break;
      default:
        dispatchBotEvent(m, d, (name, detail) => this.host.dispatchOnWindow(name, detail)); // unknown types are ignored: the vocabulary grows
    }
  }

  private setBotSpeaking(speaking: boolean): void {
    if (speaking === this.botSpeaking) return;
    this.botSpeaking = speaking;
    this.host.dispatch('botIsSpeaking', { isSpeaking: speaking });
    this.host.setBotSpeaking(speaking);
  }

  // ---- ending -----------------------------------------------------------------------------

  private finish(outcome: Outcome, options: { faultDomain?: FaultDomain; release?: 'fetch' | 'beacon' | 'none'; hangUp?: boolean } = {}): void {
    if (this.phase === 'done') return;
    const phase = this.phase;
    this.phase = 'done';
    const faultDomain = options.faultDomain ?? OUTCOMES[outcome];
    this.abort.abort();
    this.disarmSetupTimer();
    for (const timer of this.timers) clearTimeout(timer);
    if (this.iceTimer !== null) clearTimeout(this.iceTimer);
    this.meter.stop(phase === 'session');
    const room = this.room;
    if (room) {
      if (options.hangUp) this.sendToBot({ type: 'hang-up' });
      room.leave();
    }
    if (this.roomName && options.release !== 'none' && this.roomClosedReason === null) this.release(this.roomName, options.release ?? 'fetch');
    for (const track of this.mic?.getTracks() ?? []) track.stop();
    this.host.video.srcObject = null;
    this.host.audio.srcObject = null;
    if (this.queuing) this.leaveQueue();
    this.setBotSpeaking(false);
    this.host.setSoundBlocked(false);
    this.host.setBotState(phase === 'session' ? 'ended' : 'disconnected');
    this.host.setConnectionState('disconnected');
    this.emitOutcome(outcome, phase, faultDomain);
    this.host.callEnded(this, { outcome, phase, faultDomain });
  }

  /** POST {core-api-endpoint}/v1/public/agents/connect/{room}: a beacon when the page is going away, else fetch with keepalive. */
  private release(room: string, mode: 'fetch' | 'beacon'): void {
    const url = `${this.settings.endpoint}/v1/public/agents/connect/${encodeURIComponent(room)}`;
    try {
      if (mode === 'beacon' && typeof navigator.sendBeacon === 'function' && navigator.sendBeacon(url)) return;
    } catch {
      // fall through to fetch
    }
    void fetch(url, { method: 'POST', keepalive: true, credentials: 'omit' }).catch(() => undefined);
  }

  private emitOutcome(outcome: Outcome, phase: OutcomePhase, faultDomain: FaultDomain): void {
    const now = performance.now();
    const detail: SessionOutcomeDetail = {
      outcome,
      phase,
      faultDomain,
      ...(this.sessionId ? { sessionId: this.sessionId } : {}),
      agentId: this.settings.agentId,
      instanceId: this.settings.instanceId,
      httpStatus: this.httpStatus,
      elapsedMs: Math.round(phase === 'session' ? now - this.readyAt : now - this.settings.startClicked),
      widgetVersion: WIDGET_VERSION,
    };
    this.host.dispatchOnWindow('SvcSessionOutcome', detail);
  }

  private emitTimingReport(): void {
    const m = this.marks;
    const s = this.settings;
    const detail: ConnectionTimingReportDetail = {
      instanceId: s.instanceId,
      sessionId: this.sessionId!,
      agentId: s.agentId,
      marks: { scriptStart: round(s.scriptStart), startClicked: round(s.startClicked), ...Object.fromEntries(Object.entries(m).map(([k, v]) => [k, v === null ? null : round(v)])) } as ConnectionTimingReportDetail['marks'],
      durations: {
        microphoneMs: since(s.startClicked, m.microphoneReady),
        queuedMs: round(this.queuedMs),
        connectRequestMs: since(m.connectRequest, m.connectResponse),
        signallingMs: since(m.connectResponse, m.signallingJoined),
        iceMs: since(m.signallingJoined, m.iceConnected),
        firstVideoFrameMs: since(m.signallingJoined, m.firstVideoFrame),
        botReadyMs: since(m.signallingJoined, m.botReady),
        totalMs: round(this.readyAt - s.startClicked),
      },
      connectAttempts: this.connectAttempts,
    };
    this.host.dispatchOnWindow('ConnectionTimingReport', detail);
  }
}

