/**
 * The latency report's stages (agent/session-messages.ts) read off a real voice pipeline whose
 * services take known times on the virtual clock: the STT's final 150 ms after the turn ended,
 * the LLM's first (and only) token 300 ms after its request, the TTS's first audio 100 ms after its own.
 * Each engine stage is that engine's own time: a `metrics` frame travels downstream through every
 * processor after the one that made it, so the LLM's and TTS's taps also see the metrics of the
 * processors before them (the STT's ttfb passes the LLM, the LLM's passes the TTS).
 */
import test from 'ava';
import { concat, silence, VirtualClock } from '../../core/index.ts';
import { createVoicePipeline } from '../../agent/voice-pipeline.ts';
import { SessionMessageEmitter } from '../../agent/session-messages.ts';
import type { BotMessage, LatencyReport } from '../../protocol/session-messages.ts';
import { Conversation } from '../../testing/index.ts';
import { EnergyVAD, ScriptedLLM, ScriptedSTT, ToneTTS, toneSpeech } from '../../testing/scripted-services.ts';
import { MemoryMediaSink } from '../../transports/media-sink.ts';

const STT_MS = 150;
const LLM_MS = 300;
const TTS_MS = 100;

test('the report gives each engine its own time to first byte: the STT\'s and the LLM\'s metrics passing a later tap are not taken for its own', async (t) => {
  const clock = new VirtualClock();
  const messages: BotMessage[] = [];
  // As the bot runner's sink: the pipeline's messages for the client (the user's transcript turn) go through the emitter.
  const sink = new MemoryMediaSink();
  sink.sendMessage = (m) => emitter.fromPipeline(m);
  // The old fixed rule: the turn ends at the VAD's stop, before the STT's final (which comes 150 ms later).
  const voice = createVoicePipeline({
    vad: new EnergyVAD(),
    stt: new ScriptedSTT(clock, ['what time is it'], STT_MS),
    llm: new ScriptedLLM(clock, ['Noon.'], LLM_MS, 0),
    tts: new ToneTTS(clock, TTS_MS),
    sink,
    language: 'en',
    turnAnalyzer: null,
    vadOptions: { startMs: 100, stopMs: 400 },
  });
  const emitter = new SessionMessageEmitter({
    send: (m) => messages.push(m),
    taps: { vad: voice.vad.name, stt: voice.stt.name, turns: voice.turns.name, user: voice.user.name, llm: voice.llm.name, tts: voice.tts.name, output: voice.output.name },
    userId: () => 'visitor',
    vadStopMs: 400,
  });
  const c = await Conversation.start({ pipeline: voice.processors, clock, worker: { observers: [emitter] } });
  await c.say(concat([toneSpeech(800), silence(400, 16_000)]));
  await c.expect(() => messages.some((m) => m.type === 'latency-report'), 3000, 'the latency report');
  const report = messages.find((m): m is Extract<BotMessage, { type: 'latency-report' }> => m.type === 'latency-report')! as LatencyReport;
  t.is(report.stages.stt_ms, STT_MS);
  t.is(report.stages.llm_ttfb_ms, LLM_MS);
  t.is(report.stages.tts_ttfb_ms, TTS_MS);
  // The answer's first audio follows the three engines one after the other, with no wait of the pipeline's own on the virtual clock.
  t.is(report.user_stopped_to_bot_audio_ms, STT_MS + LLM_MS + TTS_MS);
  await c.cancel();
});
