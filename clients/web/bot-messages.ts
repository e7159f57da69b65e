/**
 * The bot's session messages (docs/session-messages.md) that become widget DOM events without
 * touching the call's state, and the `session-ended` reasons as outcomes. The messages that
 * drive the call (bot-ready, bot-state, speaking, latency, session-ended, error) are handled by
 * the call itself (call.ts).
 */
import type { Outcome, WindowEventName } from './events.ts';

const isString = (v: unknown): v is string => typeof v === 'string';

/** termination_reason of the bot's `session-ended` -> outcome. */
export function outcomeForEnding(reason: string): Outcome {
  switch (reason) {
    case 'client_hung_up':
    case 'client_released':
      return 'ended_by_visitor';
    case 'agent_ended':
      return 'ended_by_agent';
    case 'session_limit_reached':
    case 'max_duration_reached':
      return 'time_limit_reached';
    case 'server_shutdown':
      return 'service_shutdown';
    case 'client_left':
    case 'join_timeout':
      return 'transport_lost';
    case 'ice_failed':
      return 'ice_failed';
    case 'pipeline_error':
    case 'runner_lost':
    case 'bot_start_failed':
    case 'room_creation_failed':
      return 'agent_error';
    default:
      return 'ended_by_agent';
  }
}

/**
 * Dispatches the event of a transcript or tool-call message; false for any other message (the
 * call's own, or a type the widget does not know: the vocabulary grows).
 */
export function dispatchBotEvent(
  m: Record<string, unknown>,
  dispatch: (name: string, detail: unknown) => void,
  dispatchOnWindow: (name: WindowEventName, detail: unknown) => void,
): boolean {
  switch (m.type) {
    case 'user-transcription':
      if (isString(m.text)) dispatch('ReceivedTranscriptUser', { text: m.text, timestamp: isString(m.timestamp) ? m.timestamp : new Date().toISOString(), user: isString(m.user_id) ? m.user_id : 'user', final: m.final === true });
      return true;
    case 'bot-llm-text':
      if (isString(m.text)) dispatch('ReceivedTranscriptBot', { text: m.text });
      return true;
    case 'bot-output':
      if (isString(m.text)) dispatch('ReceivedTranscriptBotPartial', { owner: 'bot', text: m.text, final: false });
      return true;
    case 'bot-tts-stopped':
      dispatch('BotTtsStopped', null);
      return true;
    case 'bot-paused':
      dispatch('BotPaused', null);
      return true;
    case 'bot-resumed':
    case 'bot-interrupted':
      dispatch(m.type === 'bot-resumed' ? 'BotResumed' : 'BotInterrupted', { reason: isString(m.reason) ? m.reason : '', text: isString(m.text) ? m.text : '' });
      return true;
    case 'transcript-turn':
      if (isString(m.text) && (m.owner === 'user' || m.owner === 'bot')) dispatch('ReceivedTranscriptTurn', { owner: m.owner, text: m.text, final: true });
      return true;
    case 'tool-call': {
      if (!isString(m.function_name)) return true;
      let args: unknown = m.arguments;
      if (isString(args)) {
        try {
          args = JSON.parse(args);
        } catch {
          args = {};
        }
      }
      if (!args || typeof args !== 'object' || Array.isArray(args)) args = {};
      dispatchOnWindow('svcToolCall', { function_name: m.function_name, tool_call_id: String(m.tool_call_id ?? ''), arguments: args });
      return true;
    }
    default:
      return false;
  }
}
