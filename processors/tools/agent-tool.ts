/**
 * Agent tools as the spec stores them (element of `Agent.tools`), and the function definitions
 * the language model sees for them.
 */
import type { ToolDefinition } from '../services.ts';

/** One element of `Agent.tools`, as stored by the REST API. */
export interface AgentTool {
  readonly tool_id?: string;
  /** A disabled tool keeps its configuration but is hidden from the model. Default true. */
  readonly enabled?: boolean;
  readonly type?: 'function';
  readonly function: {
    readonly name: string;
    readonly description?: string;
    /** A JSON Schema; only `properties` and `required` are read. */
    readonly parameters?: Readonly<Record<string, unknown>>;
  };
  readonly delivery: {
    readonly mode: 'client' | 'webhook';
    readonly url?: string;
    readonly wait_for_response?: boolean;
  };
}

/** Name of the built-in hang-up tool; user tools may not use it. */
export const END_CALL_TOOL = 'end_call';

export const END_CALL_DEFINITION: ToolDefinition = {
  name: END_CALL_TOOL,
  description:
    'End the conversation. Say goodbye first, in the same response; the call ends after your farewell has been spoken. ' +
    'Use it when the user wants to hang up or the conversation is clearly over.',
  parameters: { type: 'object', properties: {} },
};

/**
 * The model-facing definition of a tool: name, description, and of `parameters` only
 * `properties` and `required` (every other top-level keyword is dropped, as the spec says).
 */
export function toolDefinition(tool: AgentTool): ToolDefinition {
  const schema = tool.function.parameters ?? {};
  const properties = isPlainObject(schema['properties']) ? (schema['properties'] as Record<string, unknown>) : {};
  const rawRequired = schema['required'];
  const required = Array.isArray(rawRequired) ? rawRequired.filter((r): r is string => typeof r === 'string') : undefined;
  return {
    name: tool.function.name,
    ...(tool.function.description ? { description: tool.function.description } : {}),
    parameters: {
      type: 'object',
      properties,
      ...(required && required.length > 0 ? { required } : {}),
    },
  };
}

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}
