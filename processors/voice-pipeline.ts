/**
 * The standard voice conversation, assembled: input audio -> VAD -> STT -> user turns ->
 * behaviours -> LLM (+ tool dispatch) -> TTS -> [avatar] -> output -> assistant turns.
 * Agent settings map one to one onto the processors' options, so a session built from an Agent
 * record and one built by hand in a bot behave the same.
 */
import type { FrameProcessor } from '../core/processor.ts';
import { Pipeline } from '../core/pipeline.ts';
import { OutputTransport, type OutputOptions } from '../transports/output-transport.ts';
import type { MediaSink } from '../transports/media-sink.ts';
import { AssistantTurnAggregator } from './aggregators/assistant-aggregator.ts';
import { AvatarProcessor } from './avatar/avatar-processor.ts';
import { UserTurnAggregator } from './aggregators/user-aggregator.ts';
import { ConversationBehaviours, type BehaviourOptions } from './behaviours/conversation-behaviours.ts';
import { LLMContext } from './llm/context.ts';
import { LLMProcessor } from './llm/llm-processor.ts';
import type { LLMService, STTService, TTSService, ToolDefinition, VADAnalyzer } from './services.ts';
import { STTProcessor, type STTOptions } from './stt/stt-processor.ts';
import { TTSProcessor, type TTSOptions } from './tts/tts-processor.ts';
import { VADProcessor, type VADOptions } from './vad/vad-processor.ts';

export interface VoicePipelineOptions {
  readonly vad: VADAnalyzer;
  readonly stt: STTService;
  readonly llm: LLMService;
  readonly tts: TTSService;
  readonly sink: MediaSink;
  /** The agent's spoken language: STT language, TTS voice filter and the system-prompt pin. */
  readonly language?: string;
  readonly systemPrompt?: string | null;
  readonly voiceId?: string | null;
  /** advanced.llm_max_tokens */
  readonly llmMaxTokens?: number;
  /** behaviour.allow_interruption */
  readonly allowInterruption?: boolean;
  readonly behaviours?: BehaviourOptions;
  readonly tools?: readonly ToolDefinition[];
  /** Processor placed right after the LLM (e.g. the tool dispatcher). */
  readonly afterLLM?: FrameProcessor;
  /** Processor placed between TTS and output (e.g. the avatar). */
  readonly beforeOutput?: FrameProcessor;
  readonly vadOptions?: VADOptions;
  readonly sttOptions?: STTOptions;
  readonly ttsOptions?: TTSOptions;
  readonly outputOptions?: OutputOptions;
}

export interface VoicePipeline {
  readonly pipeline: Pipeline;
  readonly context: LLMContext;
  readonly vad: VADProcessor;
  readonly stt: STTProcessor;
  readonly llm: LLMProcessor;
  readonly tts: TTSProcessor;
  readonly output: OutputTransport;
  readonly behaviours: ConversationBehaviours;
}

export function createVoicePipeline(o: VoicePipelineOptions): VoicePipeline {
  const allowInterruption = o.allowInterruption ?? true;
  const context = new LLMContext({ systemPrompt: o.systemPrompt, language: o.language, tools: o.tools });
  const vad = new VADProcessor(o.vad, { allowInterruption, ...o.vadOptions });
  const stt = new STTProcessor(o.stt, { language: o.language, ...o.sttOptions });
  const user = new UserTurnAggregator(context, { allowInterruption });
  const behaviours = new ConversationBehaviours(o.behaviours);
  const llm = new LLMProcessor(o.llm, context, { maxTokens: o.llmMaxTokens });
  // The avatar places each word on its face's playback timeline, so the TTS need not hold a
  // piece's audio until the provider's word timings come (a provider without timings would
  // otherwise hold the whole piece).
  const holdAudioForWordTimings = !(o.beforeOutput instanceof AvatarProcessor);
  const tts = new TTSProcessor(o.tts, { language: o.language, voiceId: o.voiceId ?? undefined, holdAudioForWordTimings, ...o.ttsOptions });
  const output = new OutputTransport(o.sink, o.outputOptions);
  const assistant = new AssistantTurnAggregator(context);
  const chain: FrameProcessor[] = [vad, stt, user, behaviours, llm];
  if (o.afterLLM) chain.push(o.afterLLM);
  chain.push(tts);
  if (o.beforeOutput) chain.push(o.beforeOutput);
  chain.push(output, assistant);
  return { pipeline: new Pipeline(chain, { name: 'VoicePipeline' }), context, vad, stt, llm, tts, output, behaviours };
}
