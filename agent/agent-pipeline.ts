/**
 * Builds the conversation pipeline of one agent session from its Agent record, so that every
 * setting the owner saves does something real:
 *
 * | Agent field | where it acts |
 * | --- | --- |
 * | `language` | STT language, TTS voice choice, system-prompt pin of the answer language |
 * | `system_prompt` | the LLM context's system message |
 * | `tts_provider`, `voice_id` | which TTS plugin speaks, with which voice |
 * | `behaviour.*` | greeting / nudge / farewell lines and modes, duration limit, interruption |
 * | `starts_conversation` | the greeting is spoken first |
 * | `advanced.llm_max_tokens` | the LLM's token limit |
 * | `advanced.turn_*`, `preemptive_generation`, `resume_false_interruptions`, `false_interruption_ms`, `backchannel_words` | turn taking: the VAD's pause and the turn processor's bounds (`turnSettings`) |
 * | `advanced.max_video_source_dimension` | caps the avatar canvas (largest side) |
 * | `session_limit_seconds` | hard stop with the farewell, with the behaviour's duration limit |
 * | `tools`, `mode` | the model's tool definitions and the dispatcher (`third_party`: none) |
 *
 * Speech-to-text, the LLM and VAD are deployment choices (keys in the environment), not agent
 * fields: the server's configuration (server/config/env.ts) picks the cloud plugins when their keys
 * are set, else offline ones; `SVC_STT_PROVIDER` names the speech-to-text provider outright.
 *
 * A provider that cannot start for a session (no key, settings it refuses) fails the start with a
 * `ProviderStartError` whose code (`tts_key_missing`, `stt_key_missing`, ...) the call records as
 * its `failure_reason`.
 */
import type { Clock } from '../core/clock.ts';
import { Pipeline } from '../core/pipeline.ts';
import { ProviderError } from '../core/provider-error.ts';
import type { Registry } from '../core/registry.ts';
import type { FaceSession } from '../processors/avatar/face-model.ts';
import { AvatarProcessor } from '../processors/avatar/avatar-processor.ts';
import type { BehaviourLine, BehaviourMode } from '../processors/behaviours/conversation-behaviours.ts';
import type { LLMService, STTService, TTSService, VADAnalyzer } from '../processors/services.ts';
import { defaultToolLogger, prepareToolset, ToolDispatcher, WebhookClient, type AgentTool, type PreparedToolset, type ToolLogger } from '../processors/tools/index.ts';
import type { TurnOptions } from '../processors/turns/turn-processor.ts';
import type { VADOptions } from '../processors/vad/vad-processor.ts';
import type { MediaSink } from '../transports/media-sink.ts';
import { createVoicePipeline, type VoicePipeline, type VoicePipelineOptions } from './voice-pipeline.ts';

/** The Agent fields the runtime reads (the REST API's full Agent shape satisfies it). */
export interface AgentRuntimeRecord {
  readonly agent_id: string;
  readonly mode: 'svc' | 'third_party';
  readonly language: string;
  readonly system_prompt: string | null;
  readonly tts_provider: string;
  readonly voice_id: string | null;
  readonly starts_conversation: boolean;
  readonly session_limit_seconds: number;
  readonly behaviour: {
    readonly greeting?: string;
    readonly greeting_reference?: string;
    readonly greeting_mode?: string;
    readonly nudge_message?: string;
    readonly nudge_reference?: string;
    readonly nudge_mode?: string;
    readonly farewell_message?: string;
    readonly farewell_reference?: string;
    readonly farewell_mode?: string;
    readonly max_conversation_duration_seconds?: number;
    readonly inactivity_nudge_seconds?: number;
    readonly allow_interruption?: boolean;
  };
  readonly advanced: AgentAdvanced;
  readonly tools: readonly AgentTool[];
  /** Read by the server's face opener (the agent's face configuration); the pipeline ignores them. */
  readonly organization_id?: string;
  readonly face_id?: string | null;
}

/** `advanced` as the runtime reads it (all optional: absent = the processors' defaults). */
export interface AgentAdvanced {
  readonly max_video_source_dimension?: number;
  readonly llm_max_tokens?: number;
  readonly turn_pause_ms?: number;
  readonly turn_unsure_ms?: number;
  readonly turn_incomplete_ms?: number;
  readonly preemptive_generation?: boolean;
  readonly resume_false_interruptions?: boolean;
  readonly false_interruption_ms?: number;
  readonly backchannel_words?: readonly string[];
}

/** The agent's turn-taking fields as processor options (undefined = the default). */
export function turnSettings(advanced: AgentAdvanced): { readonly vadOptions: VADOptions; readonly turnOptions: TurnOptions } {
  return {
    vadOptions: { stopMs: advanced.turn_pause_ms },
    turnOptions: {
      unsureMs: advanced.turn_unsure_ms,
      incompleteMs: advanced.turn_incomplete_ms,
      preemptiveGeneration: advanced.preemptive_generation,
      resumeFalseInterruptions: advanced.resume_false_interruptions,
      falseInterruptionMs: advanced.false_interruption_ms,
      backchannelWords: advanced.backchannel_words,
    },
  };
}

export interface ProviderChoice {
  readonly stt: string;
  readonly llm: string;
  readonly vad: string;
  /** Options per `kind:slug`, e.g. `{ 'llm:openai': { model: 'gpt-4o-mini' } }`. */
  readonly options?: Readonly<Record<string, Record<string, unknown>>>;
}

/** A provider that cannot start for this session; `code` (`<kind>_<provider code>`) is the call's failure_reason. */
export class ProviderStartError extends Error {
  constructor(readonly code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ProviderStartError';
  }
}

const KIND_NAMES: Readonly<Record<string, string>> = { stt: 'speech-to-text', llm: 'language model', tts: 'text-to-speech', vad: 'voice activity' };

/** `registry.create`, with a provider's refusal to start turned into a `ProviderStartError`. */
export function createProvider<T>(registry: Registry, kind: string, slug: string, options: Record<string, unknown>): T {
  try {
    return registry.create<T>(kind, slug, options);
  } catch (err) {
    if (!(err instanceof ProviderError)) throw err;
    throw new ProviderStartError(`${kind}_${err.code}`, `${KIND_NAMES[kind] ?? kind} provider ${slug} cannot start: ${err.message}`, { cause: err });
  }
}

/** Opens the avatar's face session on the pipeline clock, with the canvas cap applied. */
export type AgentFaceFactory = (clock: Clock, limits: { maxDimension: number | undefined }) => Promise<FaceSession>;

export interface AgentPipelineOptions {
  readonly registry: Registry;
  readonly sink: MediaSink;
  readonly providers: ProviderChoice;
  readonly session: { readonly session_id: string; readonly call_id: string; readonly client_user_ref: string | null };
  readonly webhooks?: WebhookClient;
  /** Where dropped tools and webhook failures are logged; default: the JSON-lines tool logger. */
  readonly logger?: ToolLogger;
  /** When set, the avatar is placed between TTS and the output. */
  readonly face?: AgentFaceFactory;
  /** Extra processor options (tests tune VAD timing this way). */
  readonly tuning?: Pick<VoicePipelineOptions, 'vadOptions' | 'sttOptions' | 'userTurnOptions' | 'ttsOptions' | 'outputOptions' | 'turnOptions' | 'turnAnalyzer'>;
}

export interface AgentPipeline extends VoicePipeline {
  /** The processors as one pipeline: what a session runs behind its input transport. */
  readonly pipeline: Pipeline;
  readonly toolset: PreparedToolset;
  readonly avatar: AvatarProcessor | undefined;
  /**
   * Options for the `PipelineWorker` that runs this pipeline: `allowInterruptions` follows
   * `behaviour.allow_interruption`. It is the only place that setting goes: the start frame
   * carries it to every processor, and the worker refuses interruption requests when it is off.
   */
  readonly workerOptions: { readonly allowInterruptions: boolean };
}

function line(text: string | undefined, reference: string | undefined, mode: string | undefined): BehaviourLine {
  return { text: text ?? '', reference: reference ?? '', mode: (mode === 'generated' ? 'generated' : 'verbatim') satisfies BehaviourMode };
}

const secondsToMs = (s: number | undefined) => (s && s > 0 ? s * 1000 : null);

export async function buildAgentPipeline(agent: AgentRuntimeRecord, options: AgentPipelineOptions): Promise<AgentPipeline> {
  const { registry, providers } = options;
  const opts = (kind: string, slug: string) => ({ ...(options.providers.options?.[`${kind}:${slug}`] ?? {}) });
  // Resolve every plugin first: an unknown slug fails here with the list of known ones.
  const tts = createProvider<TTSService>(registry, 'tts', agent.tts_provider, opts('tts', agent.tts_provider));
  const stt = createProvider<STTService>(registry, 'stt', providers.stt, opts('stt', providers.stt));
  const llm = createProvider<LLMService>(registry, 'llm', providers.llm, opts('llm', providers.llm));
  const vad = createProvider<VADAnalyzer>(registry, 'vad', providers.vad, opts('vad', providers.vad));

  // Dropped tools and failed webhooks must leave a logged reason, even when the caller passes no logger.
  const logger = options.logger ?? defaultToolLogger();
  const webhooks = options.webhooks ?? new WebhookClient();
  const toolset = await prepareToolset(agent.tools, { mode: agent.mode, webhooks, logger });
  const b = agent.behaviour;
  const limits = [secondsToMs(b.max_conversation_duration_seconds), secondsToMs(agent.session_limit_seconds)].filter((x): x is number => x !== null);
  const maxDimension = agent.advanced.max_video_source_dimension;
  const face = options.face;
  const avatar = face ? new AvatarProcessor((clock) => face(clock, { maxDimension })) : undefined;

  const turns = turnSettings(agent.advanced);
  const voice = createVoicePipeline({
    vad,
    stt,
    llm,
    tts,
    sink: options.sink,
    language: agent.language,
    systemPrompt: agent.system_prompt,
    voiceId: agent.voice_id,
    llmMaxTokens: agent.advanced.llm_max_tokens,
    tools: toolset.definitions,
    behaviours: {
      startsConversation: agent.starts_conversation,
      greeting: line(b.greeting, b.greeting_reference, b.greeting_mode),
      nudge: line(b.nudge_message, b.nudge_reference, b.nudge_mode),
      farewell: line(b.farewell_message, b.farewell_reference, b.farewell_mode),
      inactivityNudgeMs: secondsToMs(b.inactivity_nudge_seconds),
      maxConversationMs: limits.length ? Math.min(...limits) : null,
    },
    afterLLM: toolset.definitions.length
      ? new ToolDispatcher({ toolset, webhooks, logger, session: { ...options.session, agent_id: agent.agent_id } })
      : undefined,
    beforeOutput: avatar,
    ...options.tuning,
    // The agent's turn taking, under what a deployment or test tunes.
    vadOptions: { ...turns.vadOptions, ...options.tuning?.vadOptions },
    turnOptions: { ...turns.turnOptions, ...options.tuning?.turnOptions },
  });
  return {
    ...voice,
    pipeline: new Pipeline(voice.processors, { name: 'VoicePipeline' }),
    toolset,
    avatar,
    workerOptions: { allowInterruptions: b.allow_interruption ?? true },
  };
}
