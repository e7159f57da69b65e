import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import { ApiError } from '../http/api-error.ts';

/** The built-in hang-up tool; user tools may not take its name (spec "Tool"). */
export const RESERVED_TOOL_NAMES = ['end_call'] as const;

export interface ToolInput {
  tool_id?: string;
  enabled?: boolean;
  type?: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown> };
  delivery: { mode: 'client' | 'webhook'; url?: string; wait_for_response?: boolean };
}

export interface Tool {
  tool_id: string;
  enabled: boolean;
  type: 'function';
  function: { name: string; description: string; parameters: { properties: Record<string, unknown>; required: string[] } };
  delivery: { mode: 'client' } | { mode: 'webhook'; url: string; wait_for_response: boolean };
}

type NormalisedTool = Omit<Tool, 'tool_id'>;

const invalid = (index: number, field: string, message: string, reason = 'invalid_tool') =>
  new ApiError('validation_failed', `tools[${index}].${field}: ${message}`, { issues: [{ location: 'body', path: `/tools/${index}/${field.replaceAll('.', '/')}`, message, reason }] });

/**
 * Checks the rules the schema cannot express (reserved and duplicate names, URL syntax,
 * client-mode fields) and keeps only `properties` and `required` of the parameters.
 */
export function normaliseTools(input: ToolInput[]): NormalisedTool[] {
  const seen = new Set<string>();
  return input.map((tool, index) => {
    const name = tool.function.name;
    if ((RESERVED_TOOL_NAMES as readonly string[]).includes(name)) {
      throw invalid(index, 'function.name', `"${name}" is reserved for the built-in hang-up tool`, 'reserved_tool_name');
    }
    if (seen.has(name)) throw invalid(index, 'function.name', `duplicate tool name "${name}"`, 'duplicate_tool_name');
    seen.add(name);
    return {
      enabled: tool.enabled ?? true,
      type: 'function',
      function: { name, description: tool.function.description ?? '', parameters: keepParameters(index, tool.function.parameters) },
      delivery: normaliseDelivery(index, tool.delivery),
    };
  });
}

function keepParameters(index: number, parameters: Record<string, unknown> | undefined): NormalisedTool['function']['parameters'] {
  const properties = parameters?.properties ?? {};
  const required = parameters?.required ?? [];
  if (typeof properties !== 'object' || properties === null || Array.isArray(properties)) {
    throw invalid(index, 'function.parameters.properties', 'must be an object');
  }
  if (!Array.isArray(required) || required.some((r) => typeof r !== 'string')) {
    throw invalid(index, 'function.parameters.required', 'must be an array of strings');
  }
  return { properties: properties as Record<string, unknown>, required: required as string[] };
}

function normaliseDelivery(index: number, delivery: ToolInput['delivery']): Tool['delivery'] {
  if (delivery.mode === 'client') {
    if (delivery.url !== undefined || delivery.wait_for_response !== undefined) {
      throw invalid(index, 'delivery', 'url and wait_for_response apply to webhook mode only');
    }
    return { mode: 'client' };
  }
  if (delivery.url === undefined) throw invalid(index, 'delivery.url', 'is required in webhook mode');
  let url: URL;
  try {
    url = new URL(delivery.url);
  } catch {
    throw invalid(index, 'delivery.url', 'is not a valid URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw invalid(index, 'delivery.url', 'must be an http or https URL');
  return { mode: 'webhook', url: delivery.url, wait_for_response: delivery.wait_for_response ?? false };
}

export const toTool = (row: any): Tool => ({
  tool_id: row.tool_id,
  enabled: row.enabled,
  type: row.type,
  function: { name: row.name, description: row.description ?? '', parameters: row.parameters },
  delivery: row.delivery,
});

export async function loadTools(db: Knex, agentId: string): Promise<Tool[]> {
  return (await db('agent_tools').where({ agent_id: agentId }).orderBy('position')).map(toTool);
}

/**
 * Full replace matched by `function.name` (spec "Tools rule on PATCH"): an existing name keeps
 * its tool_id and is updated, a new name gets a new tool_id, absent names are deleted.
 */
export async function replaceTools(trx: Knex.Transaction, agentId: string, tools: NormalisedTool[]): Promise<void> {
  const existing = new Map<string, string>(
    (await trx('agent_tools').where({ agent_id: agentId }).select('tool_id', 'name')).map((r) => [r.name, r.tool_id]),
  );
  const keep = new Set(tools.map((t) => t.function.name));
  const gone = [...existing.entries()].filter(([name]) => !keep.has(name)).map(([, id]) => id);
  if (gone.length) await trx('agent_tools').whereIn('tool_id', gone).delete();
  for (const [position, tool] of tools.entries()) {
    const row = {
      position,
      enabled: tool.enabled,
      type: tool.type,
      description: tool.function.description,
      parameters: JSON.stringify(tool.function.parameters),
      delivery: JSON.stringify(tool.delivery),
    };
    const toolId = existing.get(tool.function.name);
    if (toolId) await trx('agent_tools').where({ tool_id: toolId }).update(row);
    else await trx('agent_tools').insert({ ...row, tool_id: randomUUID(), agent_id: agentId, name: tool.function.name });
  }
}
