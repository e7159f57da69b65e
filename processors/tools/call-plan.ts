/**
 * Decides what happens to each call of one model response, before anything is delivered:
 *
 * - a call to a tool the session does not offer (unknown, disabled, dropped) is an error result;
 * - arguments that are not a JSON object are an error result (nothing half-parsed is delivered);
 * - a call identical to the previous delivered call of the same user turn (same tool, same
 *   arguments, key order ignored) is collapsed: delivered once, the repeat answered without
 *   delivery; only consecutive repeats collapse, so A, B, A delivers A twice;
 * - at most `maxCalls` calls are executed; later ones are dropped and the model is told, in
 *   their results, to answer with speech. Collapsed and invalid calls do not count.
 */
import type { ToolCall } from '../../core/frames.ts';
import { isPlainObject } from './agent-tool.ts';
import type { SessionTool } from './toolset.ts';

export type PlannedCall =
  | { readonly kind: 'execute'; readonly call: ToolCall; readonly tool: SessionTool; readonly args: Readonly<Record<string, unknown>> }
  | { readonly kind: 'duplicate'; readonly call: ToolCall; readonly of: string }
  | { readonly kind: 'over-limit'; readonly call: ToolCall }
  | { readonly kind: 'unknown'; readonly call: ToolCall }
  | { readonly kind: 'invalid-arguments'; readonly call: ToolCall; readonly reason: string };

/** The last call delivered in the current user turn. */
export interface DeliveredCall {
  readonly key: string;
  readonly toolCallId: string;
}

export interface CallPlan {
  readonly calls: readonly PlannedCall[];
  readonly lastDelivered: DeliveredCall | undefined;
}

export function planCalls(
  calls: readonly ToolCall[],
  tools: ReadonlyMap<string, SessionTool>,
  lastDelivered: DeliveredCall | undefined,
  maxCalls: number,
): CallPlan {
  const planned: PlannedCall[] = [];
  let executed = 0;
  let last = lastDelivered;
  for (const call of calls) {
    const tool = tools.get(call.name);
    if (!tool) {
      planned.push({ kind: 'unknown', call });
      continue;
    }
    const parsed = parseArguments(call.arguments);
    if (!parsed.ok) {
      planned.push({ kind: 'invalid-arguments', call, reason: parsed.reason });
      continue;
    }
    const key = `${call.name}\u0000${canonicalJson(parsed.args)}`;
    if (last && last.key === key) {
      planned.push({ kind: 'duplicate', call, of: last.toolCallId });
      continue;
    }
    if (executed >= maxCalls) {
      planned.push({ kind: 'over-limit', call });
      continue;
    }
    executed++;
    last = { key, toolCallId: call.toolCallId };
    planned.push({ kind: 'execute', call, tool, args: parsed.args });
  }
  return { calls: planned, lastDelivered: last };
}

type Parsed = { ok: true; args: Record<string, unknown> } | { ok: false; reason: string };

/** Models send "" for a call without arguments; that is an empty object, not an error. */
export function parseArguments(raw: string): Parsed {
  // The frame type says string, but a plugin bug must not take the whole batch down with it.
  if (typeof raw !== 'string') return { ok: false, reason: 'the arguments must be a JSON string' };
  if (raw.trim() === '') return { ok: true, args: {} };
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    return { ok: false, reason: 'the arguments are not valid JSON' };
  }
  if (!isPlainObject(value)) return { ok: false, reason: 'the arguments must be a JSON object' };
  return { ok: true, args: value };
}

/** JSON with object keys sorted at every level, so `{a,b}` and `{b,a}` compare equal. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (isPlainObject(value)) {
    const keys = Object.keys(value).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k])}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}
