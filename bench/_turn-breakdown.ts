import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { BotRunner } from '../agent/bot-runner.ts';
import type { AgentRuntimeRecord } from '../agent/agent-pipeline.ts';
import { rms } from '../core/audio.ts';
import { RealClock } from '../core/clock.ts';
import type { FrameObserver, FramePushed } from '../core/observer.ts';
import { Registry } from '../core/registry.ts';
import type { FaceModel } from '../processors/avatar/face-model.ts';
import { VAD_DEFAULTS } from '../processors/vad/vad-processor.ts';
import { facePlugin } from '../plugins/face/index.ts';
import { localPlugin } from '../plugins/local/index.ts';
import { attachRoomSignalling } from '../server/rooms/room-signalling.ts';
import { AGENT_DEFAULTS } from '../server/services/agent-defaults.ts';
import { RoomVisitor } from '../test/agent/room-visitor.ts';
import { holdsWithin } from '../testing/until.ts';
import { EmbeddedRoomProvider, RoomRegistry } from '../transports/webrtc/index.ts';
import { percentile, printJson, printTable } from './table.ts';

/**
 * Where a turn's time goes: the bot runner in this process (the same runner, engines and face as
 * the server: offline engines, the VAD's default stop delay, human-portrait at 640x360) with an
 * observer on its pipeline, and a headless visitor in the room; every point is read on one clock.
 * Points of a turn: the visitor's last loud 10 ms sent -> the bot's last loud input frame -> VAD
 * stop -> STT final -> user turn committed -> LLM first text -> TTS first audio -> first speech
 * frame emitted by the face -> first loud 10 ms of that audio -> first loud 10 ms at the visitor.
 */
class TurnTracer implements FrameObserver {
  t: Record<string, number> = {};
  llmTtfb = NaN;
  ttsTtfb = NaN;
  private ttsMs = 0;
  private armed = false;

  /** @param loud RMS above which 10 ms of audio counts as loud */
  constructor(private readonly loud: number) {}

  arm(): void {
    this.t = {};
    this.llmTtfb = NaN;
    this.ttsTtfb = NaN;
    this.ttsMs = 0;
    this.armed = true;
  }

  onFramePushed(e: FramePushed): void {
    if (!this.armed || e.direction !== 'downstream') return;
    const f = e.frame;
    const at = performance.timeOrigin + e.timestampMs; // the visitor's Date.now() scale
    const from = (name: string) => e.source.startsWith(name);
    const first = (key: string, ms = at) => void (this.t[key] ??= ms);
    if (from('RoomAudioInput') && f.type === 'input-audio' && this.t.vadStop === undefined && rms(f.pcm) > this.loud) this.t.inputLastLoud = at;
    if (from('TurnProcessor') && f.type === 'user-stopped-speaking') first('vadStop');
    if (this.t.vadStop === undefined) return;
    if (from('STTProcessor') && f.type === 'transcription' && f.final && this.t.commit === undefined) this.t.sttFinal = at;
    if (from('UserTurnAggregator') && f.type === 'llm-messages') first('commit');
    if (this.t.commit === undefined) return;
    if (from('LLMProcessor') && f.type === 'llm-text') first('llmText');
    if (f.type === 'metrics') {
      // Metrics travel on through later processors: read each where it was made.
      for (const m of f.data) {
        if (m.kind !== 'ttfb') continue;
        if (from('LLMProcessor') && m.processor.startsWith('LLMProcessor') && Number.isNaN(this.llmTtfb)) this.llmTtfb = m.valueMs;
        if (from('TTSProcessor') && m.processor.startsWith('TTSProcessor') && Number.isNaN(this.ttsTtfb)) this.ttsTtfb = m.valueMs;
      }
    }
    if (from('TTSProcessor') && f.type === 'tts-audio' && f.pcm.length > 0) {
      first('ttsAudio');
      this.ttsMs += (f.pcm.length / f.sampleRate) * 1000;
      // When the face's first-frame prebuffer (80 ms of the turn's audio) was there.
      if (this.ttsMs >= 80) first('tts80');
    }
    if (from('AvatarProcessor') && f.type === 'output-audio' && this.t.ttsAudio !== undefined) {
      first('speechFrame');
      if (this.t.loudOut === undefined) {
        const win = f.sampleRate / 100;
        for (let i = 0; i + win <= f.pcm.length; i += win) {
          if (rms(f.pcm.subarray(i, i + win)) > this.loud) {
            this.t.loudOut = at + (i / f.sampleRate) * 1000;
            break;
          }
        }
      }
    }
  }
}

/**
 * The `sessions-turn-breakdown` part of `bench -- sessions`: where a turn's time goes, stage by
 * stage, from a bot runner in this process with an observer on its pipeline and a headless WebRTC
 * visitor (see the bench's header). `speech` makes the visitor's utterance; `loud` is the RMS above
 * which 10 ms of audio counts as loud.
 */
export async function turnBreakdown({ turns: TURNS, speech, loud: LOUD }: { readonly turns: number; readonly speech: (text: string) => Promise<Int16Array>; readonly loud: number }): Promise<void> {
  const registry = new Registry().use(localPlugin).use(facePlugin);
  const faceModel = registry.create<FaceModel>('face', 'human-portrait', {});
  const rooms = new RoomRegistry();
  const http = createServer((_req, res) => res.writeHead(404).end());
  const signalling = attachRoomSignalling(http, { rooms });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const provider = new EmbeddedRoomProvider(rooms, { signalUrl: `ws://127.0.0.1:${(http.address() as AddressInfo).port}/v1/rooms/signal` });
  const tracer = new TurnTracer(LOUD);
  const bot = new BotRunner({
    registry,
    providers: { stt: 'local', llm: 'local', vad: 'local' },
    openFace: (_agent, clock, limits) => faceModel.openSession({ configuration: { width: 640, height: 360 }, imageFormat: limits.imageFormat }, clock),
    rooms,
    logger: { info: () => undefined, warn: () => undefined },
    tuning: { clock: new RealClock(), observers: [tracer] },
  });
  const agent = {
    ...AGENT_DEFAULTS,
    agent_id: '7b0c0a8e-1111-4c4c-8888-0000000000b1',
    system_prompt: 'You are Ada.',
    tts_provider: 'local',
    tools: [],
    behaviour: { ...AGENT_DEFAULTS.behaviour, greeting: 'Hi.', greeting_mode: 'verbatim' },
    advanced: { ...AGENT_DEFAULTS.advanced },
  } as AgentRuntimeRecord;
  const room = await provider.createRoom();
  const running = await bot.start({ sessionId: `s_${room.room}`, callId: 'bench', agent, clientUserRef: null, room });
  const visitor = await RoomVisitor.join(room.roomUrl, room.subscriberToken);
  const rows: Array<Record<string, number>> = [];
  type ReceiveStats = Awaited<ReturnType<RoomVisitor['audioReceiveStats']>>;
  let receiveBefore = null as ReceiveStats;
  let receiveAfter = null as ReceiveStats;
  try {
    visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
    if (!(await holdsWithin(() => visitor.ofType('transcript-turn').some((m) => m.owner === 'bot'), { timeoutMs: 20_000, intervalMs: 20 }))) throw new Error('no greeting');
    const question = await speech('What is your name?');
    receiveBefore = await visitor.audioReceiveStats();
    for (let i = 0; i < TURNS; i++) {
      await new Promise((r) => setTimeout(r, 500));
      const reports = visitor.ofType('latency-report').length;
      tracer.arm();
      visitor.say(question);
      await holdsWithin(() => !visitor.speaking, { timeoutMs: 10_000, intervalMs: 20 });
      const sentAt = visitor.lastLoudSentAt;
      const ok = await holdsWithin(() => visitor.audioLevels.some((a) => a.at > sentAt && a.rms > LOUD) && visitor.ofType('latency-report').length > reports && tracer.t.loudOut !== undefined, { timeoutMs: 20_000, intervalMs: 20 });
      if (!ok) continue;
      const heard = visitor.audioLevels.find((a) => a.at > sentAt && a.rms > LOUD)!.at;
      const t = tracer.t;
      const stt = Math.max(0, (t.sttFinal ?? t.vadStop!) - t.vadStop!);
      rows.push({
        uplink: t.inputLastLoud! - sentAt,
        vadAfterStopDelay: t.vadStop! - t.inputLastLoud! - VAD_DEFAULTS.stopMs,
        stt,
        aggregator: t.commit! - Math.max(t.vadStop!, t.sttFinal ?? t.vadStop!),
        llmTtfb: orZero(tracer.llmTtfb),
        llmOurs: t.llmText! - t.commit! - orZero(tracer.llmTtfb),
        ttsTtfb: orZero(tracer.ttsTtfb),
        ttsOurs: t.ttsAudio! - t.llmText! - orZero(tracer.ttsTtfb),
        avatar: t.speechFrame! - t.ttsAudio!,
        ttsTo80ms: (t.tts80 ?? t.ttsAudio!) - t.ttsAudio!,
        leadingQuiet: t.loudOut! - t.speechFrame!,
        downlink: heard - t.loudOut!,
        ttsAudioToHeard: heard - t.ttsAudio!,
        total: heard - sentAt,
      });
      await holdsWithin(() => visitor.ofType('bot-tts-stopped').length > reports + 1, { timeoutMs: 20_000, intervalMs: 20 });
    }
    receiveAfter = await visitor.audioReceiveStats();
  } finally {
    visitor.close();
    await running.stop('client_released');
    rooms.closeAll();
    await signalling.close();
    http.closeAllConnections();
    await new Promise<void>((resolve) => http.close(() => resolve()));
  }
  const col = (k: string) => rows.map((r) => r[k]!);
  const stages: Array<[string, string, boolean]> = [
    ['uplink', 'visitor last loud 10 ms sent -> bot input frame (Opus, loopback, bot jitter buffer, 20 ms input chunks)', true],
    ['vadAfterStopDelay', `bot last loud input -> end of the turn, beyond the VAD's ${VAD_DEFAULTS.stopMs} ms pause (VAD windows, smoothing, the turn analyzer's wait)`, true],
    ['stt', 'VAD stop -> STT final (engine)', false],
    ['aggregator', 'STT final / VAD stop -> user turn committed', true],
    ['llmTtfb', 'LLM time to first token (engine)', false],
    ['llmOurs', 'turn committed -> first LLM text, beyond the engine', true],
    ['ttsTtfb', 'TTS time to first audio (engine)', false],
    ['ttsOurs', 'first LLM text -> first TTS audio pushed, beyond the engine (first sentence, word timings)', true],
    ['avatar', 'first TTS audio -> first speech frame emitted (prebuffer, 40 ms grid, render lead)', true],
    ['ttsTo80ms', '  of which: first TTS audio -> 80 ms of it pushed (the face\'s prebuffer filling)', false],
    ['leadingQuiet', 'first speech frame -> its first loud 10 ms (the TTS audio\'s own onset)', false],
    ['downlink', 'first loud 10 ms emitted -> heard at the visitor (publisher, Opus, jitter buffer)', true],
    ['ttsAudioToHeard', '  avatar + leadingQuiet + downlink: first TTS audio -> first loud 10 ms heard (a frame sent sooner can wait for audio sent before it)', false],
    ['total', 'visitor last loud 10 ms sent -> first loud 10 ms heard', false],
  ];
  printTable(stages.map(([k, what, ours]) => ({ stage: k, what, ours: ours ? 'yes' : '', p50: percentile(col(k), 50), p90: percentile(col(k), 90), max: Math.max(...col(k)) })));
  const oursSum = rows.map((r) => stages.filter(([, , ours]) => ours).reduce((sum, [k]) => sum + r[k]!, 0));
  printJson('sessions-turn-breakdown', {
    turns: rows.length,
    vad_stop_delay_ms: VAD_DEFAULTS.stopMs,
    ...Object.fromEntries(stages.map(([k]) => [`${k}_p50_ms`, Number(percentile(col(k), 50).toFixed(1))])),
    ours_p50_ms: Number(percentile(oursSum, 50).toFixed(1)),
    ours_p99_ms: Number(percentile(oursSum, 99).toFixed(1)),
    ttsAudioToHeard_p90_ms: Number(percentile(col('ttsAudioToHeard'), 90).toFixed(1)),
    ttsAudioToHeard_max_ms: Number(Math.max(...col('ttsAudioToHeard')).toFixed(1)),
    // The visitor's receive jitter buffer over the turns: its mean delay, and the audio it had to
    // conceal, stretch or compress (ms at 48 kHz), where libwebrtc reports them.
    ...(receiveBefore && receiveAfter ? {
      visitor_jitter_buffer_ms: Number((((receiveAfter.jitterBufferDelayS - receiveBefore.jitterBufferDelayS) / Math.max(1, receiveAfter.jitterBufferEmittedCount - receiveBefore.jitterBufferEmittedCount)) * 1000).toFixed(1)),
      visitor_concealed_ms: Math.round((receiveAfter.concealedSamples - receiveBefore.concealedSamples) / 48),
      visitor_stretched_ms: Math.round((receiveAfter.insertedSamplesForDeceleration - receiveBefore.insertedSamplesForDeceleration) / 48),
      visitor_compressed_ms: Math.round((receiveAfter.removedSamplesForAcceleration - receiveBefore.removedSamplesForAcceleration) / 48),
      visitor_received_s: Number(((receiveAfter.totalSamplesReceived - receiveBefore.totalSamplesReceived) / 48_000).toFixed(1)),
    } : {}),
  });
}

const orZero = (v: number) => (Number.isFinite(v) ? v : 0);
