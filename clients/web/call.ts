/**
 * One call of the widget, from the start click to its end: microphone, the session (the Session
 * API's connect request with its queue, and the release: session-api.ts), the room (transport.ts:
 * the embedded room, bundled, or a LiveKit room, loaded on demand), the bot's session messages
 * turned into DOM events (bot-messages.ts for the plain ones), the setup timeout and the outcome.
 * Levels, the browser's voice activity and per-turn latency are measured by its CallMeter
 * (call-meter.ts), the setup steps' times by its ConnectionTiming (connection-timing.ts). The
 * element (element.ts) owns the view and the event target (their contract: call-contract.ts); a
 * Call is used once.
 */
import { SESSION_PROTOCOL_VERSION } from '../../protocol/session-messages.ts';
import { OUTCOMES, type FaultDomain, type Outcome, type OutcomePhase, type SessionOutcomeDetail } from './events.ts';
import { dispatchBotEvent, outcomeForEnding } from './bot-messages.ts';
import { CallMeter } from './call-meter.ts';
import { ConnectionTiming } from './connection-timing.ts';
import { joinEmbeddedRoom } from './embedded-transport.ts';
import { loadLiveKit } from './livekit-loader.ts';
import { CallFailure, offline, SessionApi, type SessionGrant } from './session-api.ts';
import { JoinFailure, roomKind, roomNameOf, type JoinRoom, type RoomTransport } from './transport.ts';
import { WIDGET_VERSION } from '../../protocol/widget-version.ts';
import { CALL_DEFAULTS, type CallHost, type CallSettings, type LocalEnd } from './call-contract.ts';

export { CALL_DEFAULTS, type CallEnd, type CallHost, type CallSettings, type LocalEnd } from './call-contract.ts';

const SPEECH_CONSTRAINTS: MediaTrackConstraints = { echoCancellation: true, noiseSuppression: true, autoGainControl: true };

const isString = (v: unknown): v is string => typeof v === 'string';

export class Call {
  private phase: OutcomePhase | 'done' = 'connect';
  sessionId: string | null = null;
  private roomName: string | null = null;
  private room: RoomTransport | null = null;
  private roomClosedReason: string | null = null;
  private sessionEndedReason: string | null = null;
  private fatalBotError = false;
  private mic: MediaStream | null = null;
  private readonly abort = new AbortController();
  private setupTimer: ReturnType<typeof setTimeout> | null = null;
  private iceTimer: ReturnType<typeof setTimeout> | null = null;
  /** The connect request, its queue, and the release (session-api.ts). */
  private readonly api: SessionApi;
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
  /** When each setup step happened (connection-timing.ts). */
  private readonly timing = new ConnectionTiming();
  /** Levels, browser voice activity and per-turn latency (call-meter.ts). */
  private readonly meter: CallMeter;

  constructor(
    private readonly host: CallHost,
    private readonly settings: CallSettings,
  ) {
    const call = this;
    this.api = new SessionApi(settings, {
      ended: () => this.phase === 'done',
      attempt: () => {
        this.armSetupTimer();
        this.timing.mark('connectRequest');
      },
      answered: () => this.timing.mark('connectResponse'),
      queuing: (on) => {
        if (on) this.disarmSetupTimer();
        host.setQueuing(on);
      },
      signal: this.abort.signal,
    });
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
      const grant = await this.api.connect();
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
    this.timing.mark('microphoneReady');
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
    // connecting with the room joined: no media path was made (ICE), said as such.
    if (connectionState === 'connecting' && this.room) return this.onIceFailed();
    // requesting: the service did not answer; connected: the bot never became ready; connecting: the network path.
    this.finish('connection_timeout', { faultDomain: connectionState === 'connecting' ? (offline() ? 'client_env' : 'unknown') : 'ojin', hangUp: true });
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
          serverFailed: () => this.onRoomServerFailed(),
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
    this.timing.mark('signallingJoined');
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
    this.timing.mark('firstVideoFrame');
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
        this.timing.mark('iceConnected');
        this.host.setConnectionState('connected');
      } else if (this.recovering) {
        this.host.setConnectionState(this.phase === 'session' ? 'ready' : 'connected');
      }
      // After a recovery (LiveKit may have rejoined as a new participant) the bot is told again;
      // it answers with its current state and changes nothing else (docs/session-messages.md).
      if (this.recovering) this.clientReadySent = false;
      this.recovering = false;
      this.maybeClientReady();
      this.maybeReady();
    } else if (!this.iceConnected) {
      // Never connected: `failed` is the end of the attempt (`disconnected` before connecting is not reported).
      if (state === 'failed') this.onIceFailed();
    } else {
      // Connected before: the room restarts ICE (a changed network) within the grace.
      this.recovering = true;
      this.host.setConnectionState('reconnecting');
      if (this.iceTimer === null) this.iceTimer = setTimeout(() => this.onTransportLost(), CALL_DEFAULTS.iceDisconnectGraceMs);
    }
  }

  /** No media path could be made: `ice_failed`, the bot told why (its call record says `ice_failed`). */
  private onIceFailed(): void {
    if (this.phase === 'done') return;
    const domain: FaultDomain = offline() ? 'client_env' : (this.room?.iceFault?.() ?? 'unknown');
    this.finish('ice_failed', { faultDomain: domain, hangUp: true, hangUpReason: 'ice_failed' });
  }

  /** The room's server could not give this visitor media: at once, not after the setup timeout, and not blamed on the network. */
  private onRoomServerFailed(): void {
    if (this.phase === 'done') return;
    this.finish(this.phase === 'session' ? 'transport_lost' : 'connection_failed', { faultDomain: 'ojin', hangUp: true });
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
        this.timing.mark('botReady', true);
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

  private finish(outcome: Outcome, options: { faultDomain?: FaultDomain; release?: 'fetch' | 'beacon' | 'none'; hangUp?: boolean; hangUpReason?: 'ice_failed' } = {}): void {
    if (this.phase === 'done') return;
    const phase = this.phase;
    this.phase = 'done';
    const faultDomain = options.faultDomain ?? OUTCOMES[outcome];
    this.abort.abort();
    this.disarmSetupTimer();
    if (this.iceTimer !== null) clearTimeout(this.iceTimer);
    this.meter.stop(phase === 'session');
    const room = this.room;
    // A hang-up that says why (ice_failed) must reach the bot before the release does, or the
    // call would be recorded as released: the release is left out when the room took the message
    // (the bot then ends the session and closes the room itself).
    let told = false;
    if (room) {
      if (options.hangUp) told = this.sendToBot(options.hangUpReason ? { type: 'hang-up', reason: options.hangUpReason } : { type: 'hang-up' });
      room.leave();
    }
    const release = options.hangUpReason && told ? 'none' : options.release;
    if (this.roomName && release !== 'none' && this.roomClosedReason === null) this.api.release(this.roomName, release ?? 'fetch');
    for (const track of this.mic?.getTracks() ?? []) track.stop();
    this.host.video.srcObject = null;
    this.host.audio.srcObject = null;
    this.api.leaveQueue();
    this.setBotSpeaking(false);
    this.host.setSoundBlocked(false);
    this.host.setBotState(phase === 'session' ? 'ended' : 'disconnected');
    this.host.setConnectionState('disconnected');
    this.emitOutcome(outcome, phase, faultDomain);
    this.host.callEnded(this, { outcome, phase, faultDomain });
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
      httpStatus: this.api.httpStatus,
      elapsedMs: Math.round(phase === 'session' ? now - this.readyAt : now - this.settings.startClicked),
      widgetVersion: WIDGET_VERSION,
    };
    this.host.dispatchOnWindow('SvcSessionOutcome', detail);
  }

  private emitTimingReport(): void {
    const { instanceId, agentId, scriptStart, startClicked } = this.settings;
    const detail = this.timing.report({ instanceId, agentId, scriptStart, startClicked, sessionId: this.sessionId!, readyAt: this.readyAt, queuedMs: this.api.queuedMs, connectAttempts: this.api.attempts });
    this.host.dispatchOnWindow('ConnectionTimingReport', detail);
  }
}

