/**
 * One admitted session's bot, run by `BotRunner` (agent/bot-runner.ts, which says what a session
 * goes through): the room, the pipeline, the face, the timeouts, the messages and the ending.
 * Also the runner's options and defaults, which the session reads.
 *
 * Lifecycle, messages and timeouts: docs/session-messages.md.
 */
import type { Subscription } from 'rxjs';
import { RealClock, withTimeout, type Clock, type TimerHandle } from '../core/clock.ts';
import type { FrameObserver } from '../core/observer.ts';
import { Pipeline } from '../core/pipeline.ts';
import type { Registry } from '../core/registry.ts';
import { ReportThrottle } from '../core/report-throttle.ts';
import { PipelineWorker, type WorkerOptions, type WorkerOutcome } from '../core/worker.ts';
import { FACE_TIMING, type FaceSession } from '../processors/avatar/face-model.ts';
import { defaultToolLogger, type ToolLogger, type WebhookClient } from '../processors/tools/index.ts';
import { SESSION_PROTOCOL_VERSION, type BotMessage } from '../protocol/session-messages.ts';
import type { MediaSink } from '../transports/media-sink.ts';
import type { FramePumpOptions } from '../transports/webrtc/avatar-frame-pump.ts';
import type { PublishedAvatar } from '../transports/webrtc/embedded-publisher.ts';
import type { RoomAudioInput } from '../transports/webrtc/room-audio-input.ts';
import type { RoomClientMessage, RoomSubscriberEvent } from '../transports/webrtc/room.ts';
import type { RoomRegistry } from '../transports/webrtc/room-registry.ts';
import type { AgentPipelineOptions, AgentRuntimeRecord, ProviderChoice } from './agent-pipeline.ts';
import { openBotRoom, type BotRoom } from './bot-room.ts';
import { VisitorPresence } from './visitor-presence.ts';
import { SESSION_TIMEOUTS, type RunningSession, type SessionOutcome, type SessionStart, type TerminationReason } from './session-contract.ts';
import { latencySummary, parseClientMessage, SessionMessageEmitter } from './session-messages.ts';
import { AppendedContextBudget } from './appended-context.ts';
import { endingFromInside, secondsToMs, SESSION_LIMIT_END_REASON } from './session-limits.ts';
import { buildSessionPipeline, type SessionPipeline } from './session-pipeline.ts';
import { errorMessage } from '../core/error-message.ts';

export type SessionTimeouts = { -readonly [K in keyof typeof SESSION_TIMEOUTS]: number };

/**
 * Opens the agent's face session on the pipeline clock (supplied by the server: it knows the
 * agent's face configuration). `imageFormat: 'rgb'` is asked for: no JPEG round trip on the way
 * to WebRTC.
 */
export type SessionFaceFactory = (
  agent: AgentRuntimeRecord,
  clock: Clock,
  limits: { readonly maxDimension: number | undefined; readonly imageFormat: 'rgb' },
) => Promise<FaceSession>;

/** Knobs for tests and special deployments; production leaves them alone. */
export interface BotRunnerTuning extends NonNullable<AgentPipelineOptions['tuning']> {
  readonly clock?: Clock;
  readonly worker?: Pick<WorkerOptions, 'idleTimeoutMs' | 'heartbeatMs'>;
  readonly publish?: FramePumpOptions;
  /** More observers of the session's pipeline (benchmarks trace a turn with one), after the message emitter. */
  readonly observers?: readonly FrameObserver[];
}

export interface BotRunnerOptions {
  readonly registry: Registry;
  readonly providers: ProviderChoice;
  readonly openFace: SessionFaceFactory;
  /** The embedded room provider's registry (where embedded sessions' rooms live). */
  readonly rooms?: RoomRegistry;
  /**
   * Private ranges a LiveKit room's url may resolve to (SVC_LIVEKIT_ALLOWED_RANGES): the bot joins
   * LiveKit rooms through the same address policy as any LiveKit publishing.
   */
  readonly livekitAllowedRanges?: readonly string[];
  /** Carries the operator's allowed address ranges to tool webhooks. */
  readonly webhooks?: WebhookClient;
  readonly logger?: ToolLogger;
  readonly timeouts?: Partial<SessionTimeouts>;
  readonly tuning?: BotRunnerTuning;
}

export const BOT_RUNNER_DEFAULTS = {
  /** Rate of the visitor's audio into the pipeline and of the output clock (the face's rate). */
  sampleRate: FACE_TIMING.audioSampleRate,
} as const;


export class BotSession implements RunningSession {
  readonly sessionId: string;
  readonly ended: Promise<SessionOutcome>;
  private resolveEnded!: (outcome: SessionOutcome) => void;
  private readonly clock: Clock;
  private readonly timeouts: SessionTimeouts;
  private readonly logger: ToolLogger;
  private emitter: SessionMessageEmitter;
  private pipeline: SessionPipeline | undefined;
  private input: RoomAudioInput | undefined;
  private worker: PipelineWorker | undefined;
  private workerDone: Promise<WorkerOutcome> | undefined;
  private face: FaceSession | undefined;
  private publication: PublishedAvatar | undefined;
  private room: BotRoom | undefined;
  private readonly subscriptions: Subscription[] = [];
  private readonly timers = new Map<string, TimerHandle>();
  private readonly presence = new VisitorPresence();

  /** Peak number of visitors in the room so far (the outcome's `participantCount` when it ends). */
  get participantPeak(): number {
    return this.presence.peak;
  }
  private clientReady = false;
  private conversationStarted = false;
  private fatalError: string | null = null;
  /** The fatal error's code (e.g. a provider's `sts_auth_failed`), recorded as the call's failure_reason. */
  private fatalCode: string | null = null;
  private finishing: Promise<SessionOutcome> | undefined;
  private startedAt = 0;
  private firstFrameAt: number | null = null;
  private conversationStartedAt: number | null = null;
  private droppedClientMessages = 0;
  private readonly appendedContext = new AppendedContextBudget();
  private readonly clientWarnings = new ReportThrottle({ now: () => this.clock.now() });
  private idleTimedOut = false;
  private roomClosedUnderUs = false;

  constructor(
    private readonly session: SessionStart,
    private readonly options: BotRunnerOptions,
  ) {
    this.sessionId = session.sessionId;
    this.clock = options.tuning?.clock ?? new RealClock();
    this.timeouts = { ...SESSION_TIMEOUTS, ...options.timeouts };
    this.logger = options.logger ?? defaultToolLogger();
    this.ended = new Promise((resolve) => (this.resolveEnded = resolve));
    this.emitter = this.createEmitter(undefined);
  }

  private createEmitter(pipeline: SessionPipeline | undefined): SessionMessageEmitter {
    return new SessionMessageEmitter({
      send: (message) => this.deliver(message),
      taps: pipeline?.taps ?? { output: '' },
      userId: () => this.session.clientUserRef ?? this.input?.participantId ?? 'user',
      vadStopMs: pipeline?.vadStopMs ?? null,
    });
  }

  // ---- start ----------------------------------------------------------------------------------

  async start(): Promise<void> {
    this.startedAt = this.clock.now();
    const avatarRoom = this.session.room;
    const room = await openBotRoom(avatarRoom, {
      ...(this.options.rooms ? { rooms: this.options.rooms } : {}),
      ...(this.options.livekitAllowedRanges ? { livekitAllowedRanges: this.options.livekitAllowedRanges } : {}),
    });
    this.room = room;
    try {
      await this.prepare(room);
    } catch (error) {
      await room.leave().catch(() => undefined);
      throw error;
    }
  }

  private async prepare(room: BotRoom): Promise<void> {
    const { agent, room: avatarRoom } = this.session;

    const sink: MediaSink = {
      // The room gets the face session's frames (picture + the audio that plays with it)
      // directly; the output transport only keeps the playback clock and the speaking state.
      writeAudio: () => undefined,
      writeImage: () => undefined,
      sendMessage: (message) => this.emitter.fromPipeline(message),
    };
    const tuning = this.options.tuning ?? {};
    const pipeline = await buildSessionPipeline(agent, {
      registry: this.options.registry,
      sink,
      providers: this.options.providers,
      session: { session_id: this.session.sessionId, call_id: this.session.callId, client_user_ref: this.session.clientUserRef },
      ...(this.options.webhooks ? { webhooks: this.options.webhooks } : {}),
      logger: this.logger,
      face: async () => {
        if (!this.face) throw new Error('the face session is not open');
        return this.face;
      },
      tuning: { vadOptions: tuning.vadOptions, sttOptions: tuning.sttOptions, ttsOptions: tuning.ttsOptions, outputOptions: tuning.outputOptions, turnOptions: tuning.turnOptions, turnAnalyzer: tuning.turnAnalyzer },
      stsApiKey: this.session.stsApiKey ?? null,
    });
    this.pipeline = pipeline;
    this.emitter = this.createEmitter(pipeline);

    this.input = room.createAudioInput();
    this.worker = new PipelineWorker(new Pipeline([this.input, pipeline.pipeline], { name: 'SessionPipeline' }), {
      clock: this.clock,
      audioInSampleRate: BOT_RUNNER_DEFAULTS.sampleRate,
      audioOutSampleRate: BOT_RUNNER_DEFAULTS.sampleRate,
      observers: [this.emitter, ...(tuning.observers ?? [])],
      ...pipeline.workerOptions,
      ...tuning.worker,
    });

    this.face = await this.options.openFace(agent, this.clock, { maxDimension: agent.advanced.max_video_source_dimension, imageFormat: 'rgb' });
    try {
      // A face that fails errors its frames: the pipeline's avatar processor ends the bot for it
      // (`face_failed`, fatal). This subscriber only needs not to leave the error unhandled, which
      // rxjs would rethrow from a timer and so take the whole process down.
      this.subscriptions.push(this.face.frames.subscribe({ next: () => (this.firstFrameAt ??= this.clock.now()), error: () => undefined }));
      // The face's size is known now: a LiveKit room gets the video track with the audio, in one negotiation.
      this.publication = await room.publishAvatar(this.face.frames, { ...tuning.publish, videoSize: { width: this.face.width, height: this.face.height } });
    } catch (error) {
      this.face.close();
      for (const s of this.subscriptions.splice(0)) s.unsubscribe();
      throw error;
    }
    const publication = this.publication;
    void publication.ended.then(async () => {
      if (this.finishing) return;
      // The room was closed under the bot: only the server does that (release).
      if (room.closed) {
        this.roomClosedUnderUs = true;
        void this.finish('client_released', null);
        return;
      }
      // A pipeline ending from inside (the farewell played) ends its face session first: let the
      // worker finish and say why. A face that stopped by itself leaves the worker running.
      if (this.workerDone && (await withTimeout(this.workerDone, this.timeouts.stopTimeoutMs, this.clock)) !== 'timeout') return;
      if (!this.finishing) void this.finish('pipeline_error', 'the avatar stopped publishing (the face session ended)');
    });

    this.subscriptions.push(
      room.clientMessages.subscribe((m) => this.onClientMessage(m)),
      room.presence.subscribe((e) => this.onSubscriberEvent(e)),
    );
    this.presence.seed(room.visitors());
    const joinMs = this.timeouts.joinDeadlineMs;
    this.timer('join', joinMs, () => void this.finish('join_timeout', this.presence.hadVisitor ? `a visitor joined but no peer connection connected within ${joinMs} ms` : `nobody joined the room within ${joinMs} ms`));
    const limitMs = secondsToMs(agent.session_limit_seconds);
    if (limitMs !== null) this.timer('limit', Math.max(0, this.startedAt + limitMs - this.clock.now()), () => this.onSessionLimit());
    this.presenceChanged();
    this.logger.info({ session_id: this.sessionId, room: avatarRoom.room, room_provider: room.provider, agent_id: agent.agent_id }, 'bot started');
  }

  // ---- presence and the conversation start ------------------------------------------------------

  private onSubscriberEvent(event: RoomSubscriberEvent): void {
    if (this.finishing) return;
    try {
      this.trackPresence(event);
    } catch (error) {
      // Never thrown back into the room (rxjs would report it as unhandled): the session ends instead.
      void this.finish('pipeline_error', `presence handling failed: ${errorMessage(error)}`);
    }
  }

  private trackPresence(event: RoomSubscriberEvent): void {
    this.presence.track(event);
    this.presenceChanged();
  }

  private presenceChanged(): void {
    if (this.finishing) return;
    const presence = this.presence;
    // The join deadline is met by a connected peer connection, not by joining the signalling.
    if (presence.connected) this.clearTimer('join');
    if (presence.failedBeforeConnecting) {
      void this.finish('ice_failed', presence.gatheringFailure ? `no media path: ${presence.gatheringFailure}` : "the visitor's peer connection failed before it connected (ICE)");
      return;
    }
    if (presence.present > 0) this.clearTimer('grace');
    else if (presence.hadVisitor && !this.timers.has('grace')) {
      this.timer('grace', this.timeouts.departureGraceMs, () => void this.finish('client_left', null));
    }
    if (this.conversationStarted) return;
    if (presence.connected) {
      if (this.clientReady) this.startConversation('client-ready and connected');
      else if (!this.timers.has('ready')) this.timer('ready', this.timeouts.clientReadyWaitMs, () => this.startConversation('no client-ready'));
    } else {
      this.clearTimer('ready'); // counted again from the next connection
    }
  }

  private startConversation(why: string): void {
    if (this.conversationStarted || this.finishing || !this.worker) return;
    this.conversationStarted = true;
    this.conversationStartedAt = this.clock.now();
    this.clearTimer('ready');
    this.clearTimer('subscribe');
    const worker = this.worker;
    this.subscriptions.push(
      worker.events$.subscribe((event) => {
        if (event.type === 'error') {
          const f = event.frame;
          if (f.fatal) {
            this.fatalError ??= f.message;
            if (f.code) this.fatalCode ??= f.code;
          }
          this.emitter.send({ type: 'error', code: f.code ?? 'pipeline_error', message: f.message, fatal: f.fatal });
        } else if (event.type === 'idle-timeout') {
          this.idleTimedOut = true;
        }
      }),
    );
    this.workerDone = worker.run();
    void this.workerDone.then((outcome) => this.onWorkerFinished(outcome));
    this.emitter.setState('listening');
    this.logger.info({ session_id: this.sessionId, why, wait_ms: this.conversationStartedAt - this.startedAt }, 'conversation started');
  }

  /** `session_limit_seconds` after the start: the farewell if a conversation runs, else the end. */
  private onSessionLimit(): void {
    if (this.finishing) return;
    if (!this.conversationStarted || !this.pipeline || !this.worker || this.worker.finished) return void this.finish('session_limit_reached', null);
    this.pipeline.endConversation(SESSION_LIMIT_END_REASON);
    this.timer('limit', this.timeouts.limitFarewellMs, () => void this.finish('session_limit_reached', null));
  }

  // ---- client messages --------------------------------------------------------------------------

  private onClientMessage({ participantId, message }: RoomClientMessage): void {
    if (this.finishing) return;
    try {
      const parsed = parseClientMessage(message);
      if ('ignored' in parsed) {
        this.droppedClientMessages++;
        this.warnThrottled('client message ignored', { participant_id: participantId, reason: parsed.reason });
        return;
      }
      switch (parsed.type) {
        case 'client-ready':
          this.clientReady = true;
          this.emitter.send({
            type: 'bot-ready',
            version: SESSION_PROTOCOL_VERSION,
            session_id: this.sessionId,
            capabilities: { audio_out: true, video_out: true, audio_in: true },
          });
          this.emitter.send({ type: 'bot-state', state: this.emitter.state });
          if (!this.conversationStarted) {
            if (this.presence.connected) this.startConversation('client-ready and connected');
            else if (!this.timers.has('subscribe')) this.timer('subscribe', this.timeouts.subscribeWaitMs, () => this.startConversation('subscribe wait over'));
          }
          return;
        case 'append-system-context': {
          const refused = this.appendedContext.admit(parsed.text);
          if (refused) this.emitter.send(refused);
          else this.pipeline?.appendSystemContext(parsed.text);
          return;
        }
        case 'hang-up':
          // A page that gives up on its media path says so: the call is recorded as failed, not hung up.
          if (parsed.reason === 'ice_failed' && !this.presence.everConnected) void this.finish('ice_failed', 'the page reported that no media path could be made (ICE)');
          else void this.finish('client_hung_up', null);
          return;
      }
    } catch (error) {
      this.droppedClientMessages++;
      this.warnThrottled('client message failed', { error: errorMessage(error) });
    }
  }

  /** A visitor decides how often these happen: a flood costs a few lines (`unlogged`: held back since the last). */
  private warnThrottled(what: string, details: Record<string, unknown>): void {
    const unlogged = this.clientWarnings.take();
    if (unlogged !== null) this.logger.warn({ session_id: this.sessionId, ...details, ...(unlogged ? { unlogged } : {}) }, what);
  }

  // ---- endings ----------------------------------------------------------------------------------

  private onWorkerFinished(outcome: WorkerOutcome): void {
    if (this.finishing) return;
    if (this.fatalError !== null || outcome.reason?.startsWith('fatal error')) {
      void this.finish('pipeline_error', this.fatalError ?? outcome.reason ?? 'fatal pipeline error');
      return;
    }
    if (outcome.how === 'ended') {
      void this.finish(endingFromInside(outcome.reason, this.session.agent), null);
      return;
    }
    if (this.idleTimedOut) {
      void this.finish('client_left', null);
      return;
    }
    void this.finish('pipeline_error', `the pipeline was cancelled: ${outcome.reason ?? 'no reason'}`);
  }

  stop(reason: TerminationReason): Promise<SessionOutcome> {
    return this.finish(reason, null);
  }

  private finish(reason: TerminationReason, detail: string | null): Promise<SessionOutcome> {
    this.finishing ??= this.teardown(reason, detail);
    return this.finishing;
  }

  private async teardown(reason: TerminationReason, detail: string | null): Promise<SessionOutcome> {
    for (const name of [...this.timers.keys()]) this.clearTimer(name);
    this.emitter.flush();
    this.emitter.setState('ended');
    this.emitter.send({ type: 'session-ended', reason });
    this.emitter.close();
    const stopMs = this.timeouts.stopTimeoutMs;
    const worker = this.worker;
    if (worker && this.conversationStarted && !worker.finished) {
      // The farewell belongs to endings from inside (duration, end_call), which finish the worker
      // themselves; from outside, nobody is there to hear one.
      if ((await withTimeout(worker.cancel(reason), stopMs, this.clock)) === 'timeout') {
        this.logger.warn({ session_id: this.sessionId }, 'the pipeline did not stop in time');
      }
    }
    this.face?.close();
    if (this.publication && (await withTimeout(this.publication.close(), stopMs, this.clock)) === 'timeout') {
      this.logger.warn({ session_id: this.sessionId }, 'unpublishing did not finish in time');
    }
    // LiveKit: the bot's own connection leaves (after the last messages went out); embedded: nothing.
    if (this.room && (await withTimeout(this.room.leave().catch(() => undefined), stopMs, this.clock)) === 'timeout') {
      this.logger.warn({ session_id: this.sessionId }, 'leaving the room did not finish in time');
    }
    for (const s of this.subscriptions.splice(0)) s.unsubscribe();
    const stats = this.emitter.stats;
    const latency = latencySummary(stats.latenciesMs);
    const outcome: SessionOutcome = {
      terminationReason: reason,
      failureDetail: detail,
      ...(reason === 'pipeline_error' && this.fatalCode ? { failureCode: this.fatalCode } : {}),
      ...(reason === 'ice_failed' && this.presence.gatheringFailure ? { failureCode: this.presence.gatheringFailure } : {}),
      participantCount: this.presence.peak,
      metadata: {
        turns: stats.transcriptTurns,
        user_turns: stats.userTurns,
        bot_turns: stats.botTurns,
        // user_stopped_to_bot_audio_ms of the answered turns (latency-report)
        latency_p50_ms: latency.p50,
        latency_max_ms: latency.max,
        latency_turns: latency.count,
        // Turn taking (processors/turns): preemptive replies and pauses of the bot by visitor sound.
        ...(this.pipeline?.voice
          ? {
              preemptive_started: this.pipeline.voice.user.preemptive.started,
              preemptive_used: this.pipeline.voice.user.preemptive.used,
              preemptive_discarded: this.pipeline.voice.user.preemptive.discarded,
              bot_pauses: this.pipeline.voice.turns.stats.pauses,
              bot_resumed: this.pipeline.voice.turns.stats.resumed,
              bot_interrupted: this.pipeline.voice.turns.stats.interrupted,
            }
          : {}),
        first_frame_ms: this.firstFrameAt === null ? null : Math.round(this.firstFrameAt - this.startedAt),
        conversation_started_ms: this.conversationStartedAt === null ? null : Math.round(this.conversationStartedAt - this.startedAt),
        client_ready: this.clientReady,
        room_provider: this.session.room.provider,
        messages_sent: stats.messages,
        client_messages_ignored: this.droppedClientMessages,
        ...(this.idleTimedOut ? { idle_timeout: true } : {}),
        ...(this.roomClosedUnderUs ? { room_closed: true } : {}),
      },
    };
    this.logger.info({ session_id: this.sessionId, reason, detail }, 'bot ended');
    this.resolveEnded(outcome);
    return outcome;
  }

  // ---- helpers ----------------------------------------------------------------------------------

  private deliver(message: BotMessage): void {
    // Called from inside the pipeline (the observer): a failing send must not break it.
    try {
      this.publication?.sendMessage?.(message as unknown as Readonly<Record<string, unknown>>);
    } catch (error) {
      this.logger.warn({ session_id: this.sessionId, type: message.type, error: errorMessage(error) }, 'session message not sent');
    }
  }

  private timer(name: string, ms: number, fn: () => void): void {
    this.clearTimer(name);
    this.timers.set(
      name,
      this.clock.setTimeout(() => {
        this.timers.delete(name);
        fn();
      }, ms),
    );
  }

  private clearTimer(name: string): void {
    const handle = this.timers.get(name);
    if (handle === undefined) return;
    this.clock.clearTimeout(handle);
    this.timers.delete(name);
  }
}
