/**
 * The pipeline of one session, whatever the agent's mode: `svc` agents get the voice pipeline
 * of agent-pipeline.ts (VAD -> STT -> LLM -> TTS -> avatar -> output); `third_party` agents get a
 * speech-to-speech pipeline (agent/s2s-pipeline.ts: the provider runs the conversation, we add
 * the face). The bot runner only sees
 * `SessionPipeline`: the processor to run, the worker options, where the message emitter taps
 * frames, and how to add system context.
 */
import type { FrameProcessor } from '../core/processor.ts';
import { VAD_DEFAULTS } from '../processors/vad/vad-processor.ts';
import { buildAgentPipeline, type AgentPipeline, type AgentPipelineOptions, type AgentRuntimeRecord } from './agent-pipeline.ts';
import { buildS2SPipeline, s2sSessionParts, type S2SAgentRecord } from './s2s-pipeline.ts';
import type { SessionTaps } from './session-messages.ts';

export interface SessionPipeline {
  readonly pipeline: FrameProcessor;
  readonly workerOptions: { readonly allowInterruptions: boolean };
  /** Where the session message emitter reads frames. */
  readonly taps: SessionTaps;
  /** The VAD's stop delay (ms), reported in latency reports; null without a VAD. */
  readonly vadStopMs: number | null;
  /** Adds a system message to the model's context for later turns (forces no reply). */
  appendSystemContext(text: string): void;
  /**
   * Ends the running conversation as its duration limit does: the farewell, then the worker ends
   * with `reason` in its outcome (the session limit counted from admission uses it).
   */
  endConversation(reason: string): void;
  /** The svc voice pipeline's parts (tests and diagnostics); absent for other modes. */
  readonly voice?: AgentPipeline;
}

/** Thrown for an agent mode this build has no pipeline for (the session fails to start). */
export class SessionPipelineUnavailable extends Error {
  constructor(readonly mode: string, message: string) {
    super(message);
    this.name = 'SessionPipelineUnavailable';
  }
}

export interface SessionPipelineOptions extends AgentPipelineOptions {
  /** `third_party`: the provider key, decrypted for this session (SessionStart.stsApiKey). */
  readonly stsApiKey?: string | null;
}

export async function buildSessionPipeline(agent: AgentRuntimeRecord, options: SessionPipelineOptions): Promise<SessionPipeline> {
  switch (agent.mode) {
    case 'svc': {
      const voice = await buildAgentPipeline(agent, options);
      return {
        pipeline: voice.pipeline,
        workerOptions: voice.workerOptions,
        taps: {
          vad: voice.vad.name,
          stt: voice.stt.name,
          turns: voice.turns.name,
          user: voice.user.name,
          llm: voice.llm.name,
          tts: voice.tts.name,
          avatar: voice.avatar?.name,
          output: voice.output.name,
        },
        vadStopMs: options.tuning?.vadOptions?.stopMs ?? agent.advanced.turn_pause_ms ?? VAD_DEFAULTS.stopMs,
        appendSystemContext: (text) => voice.context.addSystemContext(text),
        endConversation: (reason) => voice.behaviours.endConversation(reason),
        voice,
      };
    }
    case 'third_party': {
      const record = agent as S2SAgentRecord;
      const slug = record.sts_provider ?? '';
      const built = await buildS2SPipeline(record, {
        registry: options.registry,
        sink: options.sink,
        apiKey: options.stsApiKey ?? '',
        ...(options.face ? { face: options.face } : {}),
        session: options.session,
        // Deployment settings of the provider plugin, like the other kinds' (`sts:<slug>`).
        ...(options.providers.options?.[`sts:${slug}`] ? { serviceOptions: options.providers.options[`sts:${slug}`] } : {}),
        ...(options.logger ? { logger: options.logger } : {}),
        ...(options.tuning?.outputOptions ? { tuning: { outputOptions: options.tuning.outputOptions } } : {}),
      });
      return s2sSessionParts(built);
    }
    default: {
      const mode: never = agent.mode;
      throw new SessionPipelineUnavailable(String(mode), `unknown agent mode ${JSON.stringify(mode)}`);
    }
  }
}
