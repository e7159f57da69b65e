/**
 * The tools of one session, decided once when the session starts: which tools the model sees,
 * how each is delivered, and which were dropped and why.
 *
 * A webhook tool whose URL the SSRF policy refuses is dropped for the whole session (with a
 * logged reason) rather than offered to the model and failed on every call. A host that does not
 * resolve right now is kept (DNS failures can be transient) and checked again on every call.
 */
import type { ToolDefinition } from '../services.ts';
import { END_CALL_DEFINITION, END_CALL_TOOL, toolDefinition, type AgentTool } from './agent-tool.ts';
import type { ToolLogger } from './tool-logger.ts';
import type { WebhookClient } from './webhook-client.ts';
import { WebhookRefusedError } from './webhook-target.ts';

export type AgentMode = 'svc' | 'third_party';

export type ToolDelivery =
  | { readonly mode: 'client' }
  | { readonly mode: 'webhook'; readonly url: string; readonly waitForResponse: boolean }
  | { readonly mode: 'end_call' };

export interface SessionTool {
  readonly name: string;
  readonly definition: ToolDefinition;
  readonly delivery: ToolDelivery;
}

export type DropCode = 'reserved_name' | 'duplicate_name' | 'missing_url' | 'webhook_refused';

export interface DroppedTool {
  readonly name: string;
  readonly code: DropCode;
  readonly reason: string;
}

export interface PreparedToolset {
  readonly mode: AgentMode;
  /** What the model is offered (empty in `third_party` mode). */
  readonly definitions: readonly ToolDefinition[];
  /** Dispatchable tools by name (empty in `third_party` mode). */
  readonly tools: ReadonlyMap<string, SessionTool>;
  readonly dropped: readonly DroppedTool[];
}

export interface PrepareToolsetOptions {
  readonly mode: AgentMode;
  readonly webhooks: WebhookClient;
  readonly logger: ToolLogger;
  /** Offer the built-in `end_call` tool (default true). */
  readonly endCall?: boolean;
}

export async function prepareToolset(agentTools: readonly AgentTool[], options: PrepareToolsetOptions): Promise<PreparedToolset> {
  // Third-party (speech-to-speech) agents keep their tools stored, but nothing is ever dispatched.
  if (options.mode === 'third_party') return { mode: 'third_party', definitions: [], tools: new Map(), dropped: [] };

  const tools = new Map<string, SessionTool>();
  const dropped: DroppedTool[] = [];
  const drop = (name: string, code: DropCode, reason: string) => {
    dropped.push({ name, code, reason });
    options.logger.warn({ tool: name, code, reason }, `tool ${name} dropped for this session: ${reason}`);
  };

  const candidates = agentTools.filter((t) => t.enabled !== false);
  const checks = await Promise.all(
    candidates.map(async (tool) => {
      if (tool.delivery.mode !== 'webhook' || !tool.delivery.url) return undefined;
      try {
        await options.webhooks.resolve(tool.delivery.url);
        return undefined;
      } catch (err) {
        if (err instanceof WebhookRefusedError) return err;
        throw err;
      }
    }),
  );

  candidates.forEach((tool, i) => {
    const name = tool.function.name;
    if (name === END_CALL_TOOL) return drop(name, 'reserved_name', `${END_CALL_TOOL} is reserved for the built-in hang-up tool`);
    if (tools.has(name)) return drop(name, 'duplicate_name', 'another tool of this agent has the same name');
    let delivery: ToolDelivery;
    if (tool.delivery.mode === 'webhook') {
      if (!tool.delivery.url) return drop(name, 'missing_url', 'webhook delivery without a URL');
      const refusal = checks[i];
      if (refusal?.code === 'unresolvable_host') {
        // A DNS failure may be transient: keep the tool; every call checks its address again.
        options.logger.warn({ tool: name, code: refusal.code, reason: refusal.message }, `tool ${name}: webhook host does not resolve now; it is checked again on each call`);
      } else if (refusal) {
        return drop(name, 'webhook_refused', `webhook URL refused (${refusal.code}): ${refusal.message}`);
      }
      delivery = { mode: 'webhook', url: tool.delivery.url, waitForResponse: tool.delivery.wait_for_response ?? false };
    } else {
      delivery = { mode: 'client' };
    }
    tools.set(name, { name, definition: toolDefinition(tool), delivery });
  });

  if (options.endCall ?? true) {
    tools.set(END_CALL_TOOL, { name: END_CALL_TOOL, definition: END_CALL_DEFINITION, delivery: { mode: 'end_call' } });
  }
  return { mode: 'svc', definitions: [...tools.values()].map((t) => t.definition), tools, dropped };
}
