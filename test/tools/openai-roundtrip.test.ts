/**
 * The whole tool loop with real parts: the OpenAI plugin (openai SDK) against the wire-level fake
 * of the Chat Completions API (which rejects a history where a tool call has no answer, as the
 * real API does), the LLM processor and its context, the dispatcher, and a real local webhook.
 */
import test from 'ava';
import { frame } from '../../core/frames.ts';
import { Pipeline } from '../../core/pipeline.ts';
import { LLMContext } from '../../processors/llm/context.ts';
import { LLMProcessor } from '../../processors/llm/llm-processor.ts';
import { ToolDispatcher } from '../../processors/tools/tool-dispatcher.ts';
import { prepareToolset } from '../../processors/tools/toolset.ts';
import { WebhookClient } from '../../processors/tools/webhook-client.ts';
import { OpenAILLMService } from '../../plugins/openai/index.ts';
import { startOpenAIFake } from '../fakes/openai.ts';
import { captureLogger, ofType, runDispatcher } from './dispatcher-driver.ts';
import { json, startLocalWebhook } from './local-webhook.ts';
import { SESSION, webhookTool } from './tool-session.ts';

test('five calls in one response: three reach the webhook, every call is answered, and the model speaks the result', async (t) => {
  const webhook = await startLocalWebhook((r, res) => {
    const { order } = JSON.parse(JSON.parse(r.body).tool_call_message.parameters);
    json(res, 200, { result: { order, status: 'shipped' } });
  });
  const calls = [1, 2, 3, 4, 5].map((i) => ({ id: `call_${i}`, name: 'order_status', arguments: JSON.stringify({ order: `A-${i}` }) }));
  const fake = await startOpenAIFake({ replies: [{ toolCalls: calls }, { text: 'Your first three orders have shipped.' }] });
  t.teardown(() => Promise.all([webhook.close(), fake.close()]));

  const logger = captureLogger();
  const webhooks = new WebhookClient({ allowedRanges: ['127.0.0.1/32'] });
  const toolset = await prepareToolset([webhookTool('order_status', webhook.url(), true)], { mode: 'svc', webhooks, logger });
  const context = new LLMContext({ systemPrompt: 'You track orders.', tools: toolset.definitions });
  const llm = new LLMProcessor(new OpenAILLMService({ apiKey: fake.apiKey, baseUrl: fake.baseURL }), context);
  const dispatcher = new ToolDispatcher({ toolset, webhooks, session: SESSION, logger });
  const run = await runDispatcher(new Pipeline([llm, dispatcher]));

  await run.send(frame('llm-messages', { messages: [{ role: 'user', content: 'Where are my orders?' }], mode: 'append', run: true }));
  await run.waitFor(() => fake.requests.length === 2 && run.downstream.filter((f) => f.type === 'llm-response-end').length === 2, 'the second response');

  t.deepEqual(fake.requests[0]!.body.tools.map((tool: any) => tool.function.name), ['order_status', 'end_call']);
  t.is(webhook.received.length, 3, 'at most three calls executed');
  const history = fake.requests[1]!.body.messages as any[];
  const toolMessages = history.filter((m) => m.role === 'tool');
  t.deepEqual(toolMessages.map((m) => m.tool_call_id).sort(), calls.map((c) => c.id));
  t.deepEqual(JSON.parse(toolMessages.find((m) => m.tool_call_id === 'call_2').content), { order: 'A-2', status: 'shipped' });
  t.regex(toolMessages.find((m) => m.tool_call_id === 'call_5').content, /Answer the user with speech/);
  t.is(
    ofType(run.downstream, 'llm-text').map((f) => f.text).join(''),
    'Your first three orders have shipped.',
  );
  await run.stop();
});
