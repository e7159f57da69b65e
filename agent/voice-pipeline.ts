/**
 * The standard voice bot, as a list of processors in order: [input] -> VAD -> STT -> turns -> user
 * turns -> behaviours -> LLM (+ tool dispatch) -> TTS -> reply gate -> [avatar] -> output ->
 * assistant turns. Put an
 * input transport in front (the `input` option, or your own list) and run the list with
 * `runBot` (core/runner.ts), or hand it to a `PipelineWorker`.
 *
 * Agent settings map one to one onto the processors' options, so a session built from an Agent
 * record (agent-pipeline.ts) and one built by hand in a bot behave the same. Interruptions are not
 * an option here: they are the start frame's `allowInterruptions`, set on the runner or worker.
 */
import type { FrameProcessor } from '../core/processor.ts';
import { AssistantTurnAggregator } from '../processors/aggregators/assistant-aggregator.ts';
import { UserTurnAggregator, type UserTurnOptions } from '../processors/aggregators/user-aggregator.ts';
import { AvatarProcessor } from '../processors/avatar/avatar-processor.ts';
import { ConversationBehaviours, type BehaviourOptions } from '../processors/behaviours/conversation-behaviours.ts';
import { LLMContext } from '../processors/llm/context.ts';
import { LLMProcessor } from '../processors/llm/llm-processor.ts';
import type { LLMService, STTService, TTSService, ToolDefinition, TurnAnalyzer, VADAnalyzer } from '../processors/services.ts';
import { ReplyGate } from '../processors/turns/reply-gate.ts';
import { RuleTurnAnalyzer } from '../processors/turns/rule-turn-analyzer.ts';
import { TurnProcessor, type TurnOptions } from '../processors/turns/turn-processor.ts';
import { STTProcessor, type STTOptions } from '../processors/stt/stt-processor.ts';
import { TTSProcessor, type TTSOptions } from '../processors/tts/tts-processor.ts';
import { VADProcessor, type VADOptions } from '../processors/vad/vad-processor.ts';
import type { MediaSink } from '../transports/media-sink.ts';
import { OutputTransport, type OutputOptions } from '../transports/output-transport.ts';

export interface VoicePipelineOptions {
  readonly vad: VADAnalyzer;
  readonly stt: STTService;
  readonly llm: LLMService;
  readonly tts: TTSService;
  readonly sink: MediaSink;
  /** Input transport placed first (e.g. a room's audio input); without it, feed `input-audio` frames to the runner. */
  readonly input?: FrameProcessor;
  /** The agent's spoken language: STT language, TTS voice filter and the system-prompt pin. */
  readonly language?: string;
  readonly systemPrompt?: string | null;
  readonly voiceId?: string | null;
  /** advanced.llm_max_tokens */
  readonly llmMaxTokens?: number;
  readonly behaviours?: BehaviourOptions;
  readonly tools?: readonly ToolDefinition[];
  /** Processor placed right after the LLM (e.g. the tool dispatcher). */
  readonly afterLLM?: FrameProcessor;
  /** Processor placed between TTS and output (e.g. the avatar). */
  readonly beforeOutput?: FrameProcessor;
  /**
   * Decides whether a pause ends the user's turn; default the built-in `RuleTurnAnalyzer`. `null`:
   * every pause of the VAD's `stopMs` ends it (the old fixed rule; give the VAD a longer stop).
   */
  readonly turnAnalyzer?: TurnAnalyzer | null;
  readonly turnOptions?: TurnOptions;
  readonly vadOptions?: VADOptions;
  readonly sttOptions?: STTOptions;
  readonly userTurnOptions?: UserTurnOptions;
  readonly ttsOptions?: TTSOptions;
  readonly outputOptions?: OutputOptions;
}

export interface VoicePipeline {
  /** The bot, in order: what `runBot` (or a `PipelineWorker`) runs. */
  readonly processors: readonly FrameProcessor[];
  readonly context: LLMContext;
  readonly vad: VADProcessor;
  readonly stt: STTProcessor;
  readonly turns: TurnProcessor;
  readonly user: UserTurnAggregator;
  readonly behaviours: ConversationBehaviours;
  readonly llm: LLMProcessor;
  readonly tts: TTSProcessor;
  readonly gate: ReplyGate;
  readonly output: OutputTransport;
  readonly assistant: AssistantTurnAggregator;
}

export function createVoicePipeline(o: VoicePipelineOptions): VoicePipeline {
  const context = new LLMContext({ systemPrompt: o.systemPrompt, language: o.language, tools: o.tools });
  const vad = new VADProcessor(o.vad, o.vadOptions);
  const stt = new STTProcessor(o.stt, { language: o.language, ...o.sttOptions });
  const turnAnalyzer = o.turnAnalyzer === undefined ? new RuleTurnAnalyzer() : o.turnAnalyzer;
  const turns = new TurnProcessor(turnAnalyzer, { language: o.language, closingPunctuation: o.stt.punctuation !== 'segments', ...o.turnOptions });
  const user = new UserTurnAggregator(context, o.userTurnOptions);
  const behaviours = new ConversationBehaviours(o.behaviours);
  const llm = new LLMProcessor(o.llm, context, { maxTokens: o.llmMaxTokens });
  // The avatar places each word on its face's playback timeline, so the TTS need not hold a
  // piece's audio until the provider's word timings come (a provider without timings would
  // otherwise hold the whole piece).
  const holdAudioForWordTimings = !(o.beforeOutput instanceof AvatarProcessor);
  const tts = new TTSProcessor(o.tts, { language: o.language, voiceId: o.voiceId ?? undefined, holdAudioForWordTimings, ...o.ttsOptions });
  const gate = new ReplyGate();
  const output = new OutputTransport(o.sink, o.outputOptions);
  const assistant = new AssistantTurnAggregator(context);
  const processors: FrameProcessor[] = [];
  if (o.input) processors.push(o.input);
  processors.push(vad, stt, turns, user, behaviours, llm);
  if (o.afterLLM) processors.push(o.afterLLM);
  processors.push(tts, gate);
  if (o.beforeOutput) processors.push(o.beforeOutput);
  processors.push(output, assistant);
  return { processors, context, vad, stt, turns, user, behaviours, llm, tts, gate, output, assistant };
}
