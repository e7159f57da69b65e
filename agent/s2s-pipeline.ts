/**
 * Builds the pipeline of a `third_party` agent session: an external speech-to-speech provider
 * runs the conversation, we add the face. Same result shape as `buildAgentPipeline` (pipeline,
 * workerOptions, avatar, output, behaviours, toolset), so the bot runner runs both modes alike:
 *
 *   input audio -> S2SProcessor -> (tap points) -> ConversationBehaviours (duration limits) -> [avatar] -> output -> PlayoutMeter
 *
 * | Agent field | where it acts in third_party mode |
 * | --- | --- |
 * | `sts_provider` | which `sts` plugin runs the conversation |
 * | `sts_config_id` | the provider's model (OpenAI) or agent id (ElevenLabs) |
 * | `provider_config` | provider settings (turn detection, voice, overrides, ...) |
 * | `system_prompt`, `language`, `voice_id` | sent where the provider takes them per session (docs/third-party.md) |
 * | `starts_conversation`, `behaviour.greeting` | the provider speaks first (OpenAI: `response.create`) |
 * | `behaviour.allow_interruption` | barge-in on/off (worker and provider turn detection) |
 * | `behaviour.max_conversation_duration_seconds`, `session_limit_seconds` | hard stop |
 * | `advanced.max_video_source_dimension` | caps the avatar canvas |
 * | `tools` | kept on the agent, never offered nor dispatched |
 *
 * Not used in this mode: `tts_provider`, `advanced.llm_max_tokens`, the nudge and farewell lines
 * (the provider speaks; we have no voice of our own to say them with).
 *
 * The provider key comes in decrypted (`apiKey`) for this session only: it goes to the plugin and
 * nowhere else (no log, no frame, no client message).
 */
import type { Registry } from '../core/registry.ts';
import { Pipeline } from '../core/pipeline.ts';
import { PassThroughProcessor } from '../core/processor.ts';
import { AvatarProcessor } from '../processors/avatar/avatar-processor.ts';
import { ConversationBehaviours } from '../processors/behaviours/conversation-behaviours.ts';
import { PlayoutLedger, PlayoutMeter } from '../processors/s2s/playout.ts';
import { S2SProcessor } from '../processors/s2s/s2s-processor.ts';
import type { S2SService } from '../processors/s2s/s2s-service.ts';
import { defaultToolLogger, prepareToolset, WebhookClient, type PreparedToolset, type ToolLogger } from '../processors/tools/index.ts';
import { OutputTransport, type OutputOptions } from '../transports/output-transport.ts';
import type { MediaSink } from '../transports/media-sink.ts';
import type { AgentFaceFactory, AgentRuntimeRecord } from './agent-pipeline.ts';
import type { SessionTaps } from './session-messages.ts';

/** The Agent fields a third_party session reads on top of the common runtime record. */
export type S2SAgentRecord = AgentRuntimeRecord & {
  readonly sts_provider?: string | null;
  readonly sts_config_id?: string | null;
  readonly provider_config?: Readonly<Record<string, unknown>> | null;
};

export interface S2SPipelineOptions {
  readonly registry: Registry;
  readonly sink: MediaSink;
  /** The agent's provider key, decrypted by the runner for this session only. */
  readonly apiKey: string;
  /** When set, the avatar is placed between the provider and the output. */
  readonly face?: AgentFaceFactory;
  readonly session?: { readonly session_id: string; readonly call_id: string; readonly client_user_ref: string | null };
  /** Options for the `sts` plugin factory (deployment settings: base URL, TLS trust). */
  readonly serviceOptions?: Readonly<Record<string, unknown>>;
  /** Where the note about stored-but-unused tools goes. */
  readonly logger?: ToolLogger;
  readonly tuning?: { readonly outputOptions?: OutputOptions; readonly reconnectBaseMs?: number; readonly reconnectAttempts?: number };
}

export interface S2SPipeline {
  readonly pipeline: Pipeline;
  readonly s2s: S2SProcessor;
  /**
   * Where each role's frames are pushed: user speaking state (the provider processor), user
   * transcripts, bot text (`llm-text`, response start/end), bot audio (`tts-audio`).
   */
  readonly taps: { readonly userSpeech: string; readonly transcripts: string; readonly botText: string; readonly botAudio: string };
  readonly behaviours: ConversationBehaviours;
  readonly avatar: AvatarProcessor | undefined;
  readonly output: OutputTransport;
  readonly playout: PlayoutLedger;
  /** Always empty of definitions: third_party agents never dispatch tools. */
  readonly toolset: PreparedToolset;
  readonly workerOptions: { readonly allowInterruptions: boolean };
}

const secondsToMs = (s: number | undefined) => (s && s > 0 ? s * 1000 : null);

/** Thrown before anything starts when the agent cannot run in third_party mode. */
export class S2SPipelineError extends Error {
  constructor(readonly code: 'sts_provider_missing' | 'sts_provider_unknown' | 'sts_api_key_missing', message: string) {
    super(message);
    this.name = 'S2SPipelineError';
  }
}

/** Verbatim greeting: that line; generated: the provider greets freely (''); none: null. */
function greetingFor(agent: S2SAgentRecord): string | null {
  if (!agent.starts_conversation) return null;
  if (agent.behaviour.greeting_mode === 'generated') return '';
  return agent.behaviour.greeting?.trim() || null;
}

export async function buildS2SPipeline(agent: S2SAgentRecord, options: S2SPipelineOptions): Promise<S2SPipeline> {
  const slug = agent.sts_provider ?? '';
  if (!slug) throw new S2SPipelineError('sts_provider_missing', 'the agent has no sts_provider');
  if (!options.registry.has('sts', slug)) {
    const known = options.registry.list('sts').map((e) => e.slug);
    throw new S2SPipelineError('sts_provider_unknown', `no speech-to-speech provider named "${slug}"; known: ${known.join(', ') || '(none)'}`);
  }
  if (!options.apiKey) throw new S2SPipelineError('sts_api_key_missing', 'no sts_api_key is stored for this agent');
  const service = options.registry.create<S2SService>('sts', slug, { ...(options.serviceOptions ?? {}) });

  const logger = options.logger ?? defaultToolLogger();
  const toolset = await prepareToolset(agent.tools, { mode: 'third_party', webhooks: new WebhookClient(), logger });
  if (agent.tools.length) logger.info({ tools: agent.tools.length, provider: slug }, 'third_party agent: stored tools are not dispatched');

  const b = agent.behaviour;
  const allowInterruptions = b.allow_interruption ?? true;
  const playout = new PlayoutLedger();
  const s2s = new S2SProcessor(service, {
    connect: {
      apiKey: options.apiKey,
      configId: agent.sts_config_id ?? null,
      providerConfig: agent.provider_config ?? {},
      instructions: agent.system_prompt,
      language: agent.language,
      voiceId: agent.voice_id,
      greeting: greetingFor(agent),
    },
    playout,
    reconnectBaseMs: options.tuning?.reconnectBaseMs,
    reconnectAttempts: options.tuning?.reconnectAttempts,
  });
  const limits = [secondsToMs(b.max_conversation_duration_seconds), secondsToMs(agent.session_limit_seconds)].filter((x): x is number => x !== null);
  const behaviours = new ConversationBehaviours({ maxConversationMs: limits.length ? Math.min(...limits) : null });
  const maxDimension = agent.advanced.max_video_source_dimension;
  const face = options.face;
  const avatar = face ? new AvatarProcessor((clock) => face(clock, { maxDimension })) : undefined;
  const output = new OutputTransport(options.sink, options.tuning?.outputOptions);
  // One point per role the svc pipeline splits across processors (STT, LLM, TTS), so observers
  // that read frames by the processor that pushed them (the session message emitter) find each.
  const taps = {
    transcripts: new PassThroughProcessor({ name: `${s2s.name}:transcripts` }),
    botText: new PassThroughProcessor({ name: `${s2s.name}:bot-text` }),
    botAudio: new PassThroughProcessor({ name: `${s2s.name}:bot-audio` }),
  };
  const chain = [s2s, taps.transcripts, taps.botText, taps.botAudio, behaviours, ...(avatar ? [avatar] : []), output, new PlayoutMeter(playout)];
  return {
    pipeline: new Pipeline(chain, { name: 'S2SPipeline' }),
    s2s,
    taps: { userSpeech: s2s.name, transcripts: taps.transcripts.name, botText: taps.botText.name, botAudio: taps.botAudio.name },
    behaviours,
    avatar,
    output,
    playout,
    toolset,
    workerOptions: { allowInterruptions },
  };
}

/**
 * The parts the bot runner's `SessionPipeline` needs from a third_party pipeline: the provider
 * processor stands for the VAD, the tap points after it for STT, LLM and TTS.
 */
export function s2sSessionParts(built: S2SPipeline): {
  readonly pipeline: Pipeline;
  readonly workerOptions: { readonly allowInterruptions: boolean };
  readonly taps: SessionTaps;
  readonly vadStopMs: null;
  appendSystemContext(text: string): void;
  endConversation(reason: string): void;
} {
  const t = built.taps;
  return {
    pipeline: built.pipeline,
    workerOptions: built.workerOptions,
    taps: { vad: t.userSpeech, stt: t.transcripts, llm: t.botText, tts: t.botAudio, avatar: built.avatar?.name, output: built.output.name },
    vadStopMs: null,
    appendSystemContext: (text) => built.s2s.appendSystemContext(text),
    endConversation: (reason) => built.behaviours.endConversation(reason),
  };
}
