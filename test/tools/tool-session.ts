/** Builds a dispatcher the way a session does (prepare the toolset, then the processor) and runs it. */
import type { Clock } from '../../core/clock.ts';
import { Pipeline } from '../../core/pipeline.ts';
import type { FrameProcessor } from '../../core/processor.ts';
import type { AgentTool } from '../../processors/tools/agent-tool.ts';
import { ToolDispatcher, type ToolDispatcherOptions } from '../../processors/tools/tool-dispatcher.ts';
import { prepareToolset, type AgentMode, type PreparedToolset } from '../../processors/tools/toolset.ts';
import { WebhookClient, type WebhookClientOptions, type WebhookSessionMetadata } from '../../processors/tools/webhook-client.ts';
import { captureLogger, runDispatcher, type DispatcherRun } from './dispatcher-driver.ts';

export const SESSION: WebhookSessionMetadata = {
  session_id: 'sess-42',
  agent_id: 'agent-7',
  call_id: 'call-rec-3',
  client_user_ref: null,
};

export interface ToolSessionOptions {
  readonly mode?: AgentMode;
  readonly clock?: Clock;
  readonly webhooks?: WebhookClientOptions;
  readonly dispatcher?: Partial<ToolDispatcherOptions>;
  /** Processors placed right below the dispatcher (e.g. a busy TTS stand-in). */
  readonly below?: readonly FrameProcessor[];
}

export interface ToolSession {
  readonly run: DispatcherRun;
  readonly logger: ReturnType<typeof captureLogger>;
  readonly toolset: PreparedToolset;
}

export async function startToolSession(tools: readonly AgentTool[], options: ToolSessionOptions = {}): Promise<ToolSession> {
  const logger = captureLogger();
  const webhooks = new WebhookClient({ allowedRanges: ['127.0.0.1/32'], ...options.webhooks });
  const toolset = await prepareToolset(tools, { mode: options.mode ?? 'svc', webhooks, logger });
  const dispatcher = new ToolDispatcher({ toolset, webhooks, session: SESSION, logger, ...options.dispatcher });
  const under = options.below?.length ? new Pipeline([dispatcher, ...options.below]) : dispatcher;
  const run = await runDispatcher(under, options.clock);
  return { run, logger, toolset };
}

export const clientTool = (name: string, enabled = true): AgentTool => ({
  enabled,
  function: { name, description: `${name} in the page`, parameters: { type: 'object', properties: { q: { type: 'string' } } } },
  delivery: { mode: 'client' },
});

export const webhookTool = (name: string, url: string, waitForResponse: boolean): AgentTool => ({
  function: { name, description: `${name} on the server` },
  delivery: { mode: 'webhook', url, wait_for_response: waitForResponse },
});
