/**
 * A waiting webhook call still in flight when the conversation moves on (the user speaks again,
 * a behaviour runs the model): the model must still be able to answer, and the late result must
 * still enter the context, in a history the real Chat Completions API accepts. Real parts: the
 * OpenAI plugin against the wire-level fake (which rejects a tool call without its answer, and a
 * tool answer that does not follow its call), the LLM processor and context, the dispatcher and
 * a real local webhook that answers only when the test says so.
 */
import test from 'ava';
import type http from 'node:http';
import { frame } from '../../core/frames.ts';
import { Pipeline } from '../../core/pipeline.ts';
import { LLMContext } from '../../processors/llm/context.ts';
import { LLMProcessor } from '../../processors/llm/llm-processor.ts';
import { ToolDispatcher } from '../../processors/tools/tool-dispatcher.ts';
import { prepareToolset } from '../../processors/tools/toolset.ts';
import { WebhookClient } from '../../processors/tools/webhook-client.ts';
import { OpenAILLMService } from '../../plugins/openai/index.ts';
import { startOpenAIFake } from '../fakes/openai.ts';
import { captureLogger, ofType, runDispatcher, userStarted } from './dispatcher-driver.ts';
import { json, startLocalWebhook } from './local-webhook.ts';
import { SESSION, webhookTool } from './tool-session.ts';

async function setup() {
  const held: http.ServerResponse[] = [];
  const webhook = await startLocalWebhook((_r, res) => held.push(res));
  const fake = await startOpenAIFake({
    replies: [
      { toolCalls: [{ id: 'call_slow', name: 'order_status', arguments: '{"order":"A-17"}' }] },
      { text: 'I am still checking your order.' },
      { text: 'Your order A-17 has shipped.' },
    ],
  });
  const logger = captureLogger();
  const webhooks = new WebhookClient({ allowedRanges: ['127.0.0.1/32'] });
  const toolset = await prepareToolset([webhookTool('order_status', webhook.url(), true)], { mode: 'svc', webhooks, logger });
  const context = new LLMContext({ systemPrompt: 'You track orders.', tools: toolset.definitions });
  const llm = new LLMProcessor(new OpenAILLMService({ apiKey: fake.apiKey, baseUrl: fake.baseURL }), context);
  const run = await runDispatcher(new Pipeline([llm, new ToolDispatcher({ toolset, webhooks, session: SESSION, logger })]));
  const responsesEnded = () => ofType(run.downstream, 'llm-response-end').length;
  const userSays = (text: string) => run.send(frame('llm-messages', { messages: [{ role: 'user', content: text }], mode: 'append', run: true }));
  return { webhook, held, fake, context, run, responsesEnded, userSays, close: () => Promise.all([webhook.close(), fake.close()]) };
}

test('the user speaking while a waiting webhook is in flight is answered, and the late result still enters the context', async (t) => {
  const s = await setup();
  t.teardown(s.close);
  const arrived = s.webhook.nextRequest();
  await s.userSays('Where is my order?');
  await arrived;

  // The user speaks again before the webhook answers: the model runs on a valid history.
  await s.run.send(userStarted());
  await s.userSays('Hello, are you there?');
  await s.run.waitFor(() => s.responsesEnded() === 2, 'the answer to the second question');
  t.deepEqual(ofType(s.run.upstream, 'error'), [], 'the API accepted the history');
  t.is(ofType(s.run.downstream, 'llm-text').map((f) => f.text).join(''), 'I am still checking your order.');
  const second = s.fake.requests[1]!.body.messages as { role: string; tool_call_id?: string; content: string }[];
  t.deepEqual(second.map((m) => m.role), ['system', 'user', 'assistant', 'tool', 'user']);
  t.regex(second[3]!.content, /still running/, 'the model is told the call has not answered yet');

  // The webhook answers late: the result enters the context, without running the model.
  json(s.held.shift()!, 200, { result: { status: 'shipped' } });
  const lateResult = () => s.context.messages().find((m) => m.role === 'tool' && m.toolCallId === 'call_slow');
  await s.run.waitFor(() => lateResult()?.content === '{"status":"shipped"}', 'the late result in the context');
  await s.run.settle(50);
  t.is(s.fake.requests.length, 2, 'a late result does not make the agent talk over the new turn');

  // The next turn sees it, in a history the API still accepts.
  await s.userSays('So?');
  await s.run.waitFor(() => s.responsesEnded() === 3, 'the third answer');
  t.deepEqual(ofType(s.run.upstream, 'error'), []);
  const third = s.fake.requests[2]!.body.messages as { role: string; content: string }[];
  t.true(third.some((m) => /shipped/.test(m.content ?? '')), `the result is in the context: ${JSON.stringify(third)}`);
  t.is(ofType(s.run.downstream, 'llm-text').map((f) => f.text).join(''), 'I am still checking your order.Your order A-17 has shipped.');
  await s.run.stop();
});
