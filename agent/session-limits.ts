/**
 * The duration limits of a session and how an ending from inside the pipeline is named.
 * `session_limit_seconds` counts from the bot's start (admission), whatever the session does
 * (the bot asks the pipeline to end with reason `session_limit`); the behaviours' own timer
 * (`max_duration`) counts from the conversation's start and ends at the shorter of the agent's
 * two limits.
 */
import type { AgentRuntimeRecord } from './agent-pipeline.ts';
import type { TerminationReason } from './session-contract.ts';

/** The reason the bot gives the pipeline when `session_limit_seconds` comes. */
export const SESSION_LIMIT_END_REASON = 'session_limit';

export const secondsToMs = (s: number | undefined) => (s && s > 0 ? s * 1000 : null);

/** How a session whose pipeline ended by itself (after its farewell) ended, from the worker's reason. */
export function endingFromInside(workerReason: string | undefined, agent: AgentRuntimeRecord): TerminationReason {
  if (workerReason === SESSION_LIMIT_END_REASON) return 'session_limit_reached';
  if (workerReason !== 'max_duration') return 'agent_ended';
  // The behaviours end at the shorter of the two limits: say which one it was.
  const session = secondsToMs(agent.session_limit_seconds);
  const behaviour = secondsToMs(agent.behaviour.max_conversation_duration_seconds);
  return session !== null && (behaviour === null || session <= behaviour) ? 'session_limit_reached' : 'max_duration_reached';
}
