/**
 * The pipeline of one session, whatever the agent's mode: `svc` agents get the voice pipeline
 * of agent-pipeline.ts (VAD -> STT -> LLM -> TTS -> avatar -> output); `third_party` agents get a
 * speech-to-speech pipeline (agent/s2s-pipeline.ts, not there yet). The bot runner only sees
 * `SessionPipeline`: the processor to run, the worker options, where the message emitter taps
 * frames, and how to add system context.
 */
import type { FrameProcessor } from '../core/processor.ts';
import { VAD_DEFAULTS } from '../processors/vad/vad-processor.ts';
import { buildAgentPipeline, type AgentPipeline, type AgentPipelineOptions, type AgentRuntimeRecord } from './agent-pipeline.ts';
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

export async function buildSessionPipeline(agent: AgentRuntimeRecord, options: AgentPipelineOptions): Promise<SessionPipeline> {
  switch (agent.mode) {
    case 'svc': {
      const voice = await buildAgentPipeline(agent, options);
      return {
        pipeline: voice.pipeline,
        workerOptions: voice.workerOptions,
        taps: {
          vad: voice.vad.name,
          stt: voice.stt.name,
          llm: voice.llm.name,
          tts: voice.tts.name,
          avatar: voice.avatar?.name,
          output: voice.output.name,
        },
        vadStopMs: options.tuning?.vadOptions?.stopMs ?? VAD_DEFAULTS.stopMs,
        appendSystemContext: (text) => voice.context.addSystemContext(text),
        voice,
      };
    }
    case 'third_party':
      // Seam for agent/s2s-pipeline.ts (another engineer's): build it here and map it onto SessionPipeline.
      throw new SessionPipelineUnavailable('third_party', 'third_party agents need the speech-to-speech pipeline (agent/s2s-pipeline.ts), which this build does not have yet');
    default: {
      const mode: never = agent.mode;
      throw new SessionPipelineUnavailable(String(mode), `unknown agent mode ${JSON.stringify(mode)}`);
    }
  }
}
