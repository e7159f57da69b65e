/**
 * Translation from our vendor-neutral conversation (`LLMMessage`, `ToolDefinition`) to the Chat
 * Completions request shapes. Kept apart from the streaming code because it is pure and is what
 * breaks first when a context aggregator records a tool round-trip slightly wrong.
 */
import type {
  ChatCompletionFunctionTool,
  ChatCompletionMessageParam,
} from 'openai/resources/chat/completions';
import type { LLMMessage } from '../../core/frames.ts';
import type { ToolDefinition } from '../../processors/services.ts';
import { OpenAILLMError } from './errors.ts';

export function toChatMessages(messages: readonly LLMMessage[]): ChatCompletionMessageParam[] {
  return messages.map((m, i): ChatCompletionMessageParam => {
    switch (m.role) {
      case 'system':
        return { role: 'system', content: m.content ?? '' };
      case 'user':
        return { role: 'user', content: m.content ?? '' };
      case 'assistant':
        if (m.toolCalls?.length) {
          return {
            role: 'assistant',
            // The API wants null, not '', when the turn was only tool calls.
            content: m.content || null,
            tool_calls: m.toolCalls.map((tc) => ({
              id: tc.toolCallId,
              type: 'function' as const,
              function: { name: tc.name, arguments: tc.arguments },
            })),
          };
        }
        return { role: 'assistant', content: m.content ?? '' };
      case 'tool':
        if (!m.toolCallId) {
          throw new OpenAILLMError('bad_request', `messages[${i}] has role "tool" but no toolCallId; a tool result must name the call it answers`);
        }
        return { role: 'tool', tool_call_id: m.toolCallId, content: m.content ?? '' };
    }
  });
}

export function toChatTools(tools: readonly ToolDefinition[]): ChatCompletionFunctionTool[] {
  return tools.map((t) => ({
    type: 'function',
    function: {
      name: t.name,
      ...(t.description ? { description: t.description } : {}),
      parameters: {
        type: 'object',
        properties: { ...t.parameters.properties },
        ...(t.parameters.required?.length ? { required: [...t.parameters.required] } : {}),
      },
    },
  }));
}
