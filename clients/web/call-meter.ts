/**
 * What a call measures while it runs, apart from its connect/queue/outcome state (call.ts): the
 * microphone and bot levels (AnalyserNodes, sampled every 25 ms), the browser's own voice
 * activity on the microphone (`userSpeakingChanged`), the volumes (`userVolume`, `botVolume`),
 * and each turn's latency as the visitor hears it: from the end of their speech to the first
 * bot sound at the page, joined with the bot's latency-report (`LatencyReport`).
 */
import type { LatencyReportDetail, WindowEventName } from './events.ts';

export const METER_DEFAULTS = {
  /** Level sampling period; volumes are dispatched every `volumeEveryTicks` samples (100 ms). */
  samplerIntervalMs: 25,
  volumeEveryTicks: 4,
  /** Browser voice-activity detection on the microphone level (RMS, 0..1). */
  userSpeechLevel: 0.02,
  userSpeechStartTicks: 2,
  userSpeechHangoverMs: 400,
  /** Bot playback level counted as "bot audio heard". */
  botAudioLevel: 0.01,
  /** How long a latency-report waits for the page to hear the bot before it is sent without it. */
  latencyWaitMs: 3_000,
  /** Local speech older than this when the bot reports the user stopped is not used as the stop time. */
  staleSpeechMs: 3_000,
} as const;

/** What the meter needs from its call and element. */
export interface MeterHost {
  readonly audioContext: AudioContext | null;
  readonly muted: boolean;
  /** Whether the call is live (events about the conversation are only dispatched then). */
  readonly live: boolean;
  readonly ended: boolean;
  readonly sessionId: string | null;
  readonly agentId: string;
  readonly instanceId: string;
  dispatch(name: string, detail: unknown): void;
  dispatchOnWindow(name: WindowEventName, detail: unknown): void;
}

const round = (v: number) => Math.round(v * 10) / 10;
const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);

function rms(analyser: AnalyserNode | null, buffer: Float32Array<ArrayBuffer>): number {
  if (!analyser) return 0;
  analyser.getFloatTimeDomainData(buffer);
  let sum = 0;
  for (let i = 0; i < buffer.length; i++) sum += buffer[i]! * buffer[i]!;
  return Math.sqrt(sum / buffer.length);
}

export class CallMeter {
  private micAnalyser: AnalyserNode | null = null;
  private botAnalyser: AnalyserNode | null = null;
  private readonly audioNodes: AudioNode[] = [];
  private readonly levelBuffer = new Float32Array(1024);
  private sampler: ReturnType<typeof setInterval> | null = null;
  /** The loudest levels sampled since the last `userVolume` / `botVolume`. */
  private loudestUser = 0;
  private loudestBot = 0;
  private ticks = 0;
  private loudTicks = 0;
  private userSpeaking = false;
  private lastUserSpeechAt: number | null = null;
  private pendingTurn: { stopAt: number; heardAt: number | null } | null = null;
  private waitingReport: { message: Record<string, unknown>; timer: ReturnType<typeof setTimeout> } | null = null;

  constructor(private readonly host: MeterHost) {}

  /** Starts sampling (the microphone's level when there is one; the bot's once `analyseBot` is called). */
  start(mic: MediaStream | null): void {
    const ctx = this.host.audioContext;
    if (!ctx || !mic || this.sampler !== null) return;
    try {
      const source = ctx.createMediaStreamSource(mic);
      this.micAnalyser = ctx.createAnalyser();
      this.micAnalyser.fftSize = this.levelBuffer.length;
      source.connect(this.micAnalyser);
      this.audioNodes.push(source, this.micAnalyser);
    } catch {
      this.micAnalyser = null;
    }
    this.sampler = setInterval(() => this.sample(), METER_DEFAULTS.samplerIntervalMs);
  }

  /** Analysed only, never played through Web Audio (echo cancellation needs the media element path). */
  analyseBot(track: MediaStreamTrack): void {
    const ctx = this.host.audioContext;
    if (!ctx) return;
    try {
      const source = ctx.createMediaStreamSource(new MediaStream([track]));
      this.botAnalyser = ctx.createAnalyser();
      this.botAnalyser.fftSize = this.levelBuffer.length;
      source.connect(this.botAnalyser);
      this.audioNodes.push(source, this.botAnalyser);
    } catch {
      this.botAnalyser = null;
    }
  }

  /** The bot heard the visitor start a turn: a turn still waiting for the bot's sound is abandoned. */
  userStarted(): void {
    if (this.pendingTurn && this.pendingTurn.heardAt === null) this.pendingTurn = null;
  }

  /** The bot says the visitor stopped: the turn's clock starts at the page's own last loud sample when recent. */
  userStopped(): void {
    const now = performance.now();
    const local = this.lastUserSpeechAt;
    this.pendingTurn = { stopAt: local !== null && now - local < METER_DEFAULTS.staleSpeechMs ? local : now, heardAt: null };
  }

  /** The bot's latency-report: sent on as `LatencyReport` with the page's heard latency once it is known. */
  latencyReport(m: Record<string, unknown>): void {
    const turn = this.pendingTurn;
    if (turn && turn.heardAt === null) {
      if (this.waitingReport) this.emitLatency(this.waitingReport.message, null);
      const timer = setTimeout(() => {
        const waiting = this.waitingReport;
        this.waitingReport = null;
        this.pendingTurn = null;
        if (waiting) this.emitLatency(waiting.message, null);
      }, METER_DEFAULTS.latencyWaitMs);
      this.waitingReport = { message: m, timer };
      return;
    }
    this.pendingTurn = null;
    this.emitLatency(m, turn && turn.heardAt !== null ? round(turn.heardAt - turn.stopAt) : null);
  }

  /** Stops sampling and frees the audio nodes; a visitor still speaking in a live call is reported stopped. */
  stop(wasLive: boolean): void {
    if (this.sampler !== null) clearInterval(this.sampler);
    this.sampler = null;
    if (this.waitingReport) clearTimeout(this.waitingReport.timer);
    this.waitingReport = null;
    for (const node of this.audioNodes.splice(0)) node.disconnect();
    if (this.userSpeaking) {
      this.userSpeaking = false;
      if (wasLive) this.host.dispatch('userSpeakingChanged', { isSpeaking: false });
    }
  }

  private emitLatency(m: Record<string, unknown>, heardMs: number | null): void {
    const sessionId = this.host.sessionId;
    if (!sessionId) return;
    const stages = (m.stages && typeof m.stages === 'object' ? m.stages : {}) as Record<string, unknown>;
    const detail: LatencyReportDetail = {
      instanceId: this.host.instanceId,
      sessionId,
      agentId: this.host.agentId,
      turnId: num(m.turn_id) ?? 0,
      userStoppedToBotAudioHeardMs: heardMs,
      userStoppedToBotAudioMs: num(m.user_stopped_to_bot_audio_ms),
      turnDecision: typeof m.turn_decision === 'string' ? m.turn_decision : null,
      preemptive: m.preemptive === true,
      stages: { vadStopMs: num(stages.vad_stop_ms), endOfTurnMs: num(stages.end_of_turn_ms), sttMs: num(stages.stt_ms), llmTtfbMs: num(stages.llm_ttfb_ms), ttsTtfbMs: num(stages.tts_ttfb_ms), avatarMs: num(stages.avatar_ms) },
    };
    this.host.dispatchOnWindow('LatencyReport', detail);
  }

  private sample(): void {
    if (this.host.ended) return;
    const now = performance.now();
    const user = this.host.muted ? 0 : rms(this.micAnalyser, this.levelBuffer);
    const bot = rms(this.botAnalyser, this.levelBuffer);
    if (user >= METER_DEFAULTS.userSpeechLevel) {
      this.loudTicks++;
      this.lastUserSpeechAt = now;
    } else this.loudTicks = 0;
    const live = this.host.live;
    if (!this.userSpeaking && this.loudTicks >= METER_DEFAULTS.userSpeechStartTicks) {
      this.userSpeaking = true;
      if (live) this.host.dispatch('userSpeakingChanged', { isSpeaking: true });
    } else if (this.userSpeaking && this.lastUserSpeechAt !== null && now - this.lastUserSpeechAt > METER_DEFAULTS.userSpeechHangoverMs) {
      this.userSpeaking = false;
      if (live) this.host.dispatch('userSpeakingChanged', { isSpeaking: false });
    }
    const turn = this.pendingTurn;
    if (turn && turn.heardAt === null && bot >= METER_DEFAULTS.botAudioLevel) {
      turn.heardAt = now;
      const waiting = this.waitingReport;
      if (waiting) {
        clearTimeout(waiting.timer);
        this.waitingReport = null;
        this.pendingTurn = null;
        this.emitLatency(waiting.message, round(now - turn.stopAt));
      }
    }
    // The volumes report the loudest sample since the last report, not the last sample alone: a
    // page whose timers run late (a busy machine, a background tab) samples seldom, and a short
    // word between two reports still shows.
    this.loudestUser = Math.max(this.loudestUser, user);
    this.loudestBot = Math.max(this.loudestBot, bot);
    if (live && ++this.ticks % METER_DEFAULTS.volumeEveryTicks === 0) {
      this.host.dispatch('userVolume', { volume: this.host.muted ? 0 : Math.round(this.loudestUser * 1000) / 1000 });
      this.host.dispatch('botVolume', { volume: Math.round(this.loudestBot * 1000) / 1000 });
      this.loudestUser = 0;
      this.loudestBot = 0;
    }
  }
}
