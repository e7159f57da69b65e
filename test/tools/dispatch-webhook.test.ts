import test from 'ava';
import type http from 'node:http';
import { TOOL_DISPATCH_DEFAULTS } from '../../processors/tools/tool-dispatcher.ts';
import type { HostResolver } from '../../processors/tools/webhook-target.ts';
import { botStarted, interruption, ofType, response, userStarted } from './dispatcher-driver.ts';
import { json, startLocalWebhook, type LocalWebhook } from './local-webhook.ts';
import { SESSION, startToolSession, webhookTool } from './tool-session.ts';

/** A webhook that answers only when the test says so. */
async function heldWebhook(): Promise<LocalWebhook & { release(body: unknown): void; closed: Promise<void> }> {
  const held: http.ServerResponse[] = [];
  let onClosed!: () => void;
  const closed = new Promise<void>((resolve) => (onClosed = resolve));
  const server = await startLocalWebhook((_r, res) => {
    held.push(res);
    res.on('close', () => {
      if (!res.writableEnded) onClosed();
    });
  });
  return Object.assign(server, { release: (body: unknown) => json(held.shift()!, 200, body), closed });
}

const results = (frames: Parameters<typeof ofType>[0]) => ofType(frames, 'tool-call-result');

test('a waiting webhook call sends the documented body and its result enters the context', async (t) => {
  const server = await startLocalWebhook((_r, res) => json(res, 200, { result: { status: 'shipped' } }));
  t.teardown(() => server.close());
  const { run } = await startToolSession([webhookTool('order_status', server.url(), true)]);
  for (const f of response('r1', '', ['c1', 'order_status', { order: 'A-17' }])) await run.send(f);
  await run.waitFor(() => results(run.upstream).length === 1, 'the webhook result');

  t.deepEqual(JSON.parse(server.received[0]!.body), {
    tool_call_message: {
      name: 'order_status',
      parameters: '{"order":"A-17"}',
      tool_call_id: 'c1',
      response_required: true,
      tool_type: 'function',
    },
    ...SESSION,
  });
  t.like(results(run.upstream)[0], { toolCallId: 'c1', result: { status: 'shipped' }, isError: false, runLlm: true });
  await run.stop();
});

test('a failing webhook gives the model an error result', async (t) => {
  const server = await startLocalWebhook((_r, res) => json(res, 503, { error: 'down' }));
  t.teardown(() => server.close());
  const { run, logger } = await startToolSession([webhookTool('order_status', server.url(), true)]);
  for (const f of response('r1', '', ['c1', 'order_status', {}])) await run.send(f);
  await run.waitFor(() => results(run.upstream).length === 1, 'the error result');
  t.like(results(run.upstream)[0], { isError: true, result: 'Tool "order_status" failed: webhook answered HTTP 503.', runLlm: true });
  t.true(logger.entries.some((e) => e.level === 'warn' && e.fields['status'] === 503));
  await run.stop();
});

test('fire-and-forget: the model gets a neutral acknowledgement without waiting for the answer', async (t) => {
  const server = await heldWebhook();
  t.teardown(() => server.close());
  const { run } = await startToolSession([webhookTool('notify', server.url(), false)]);
  const arrived = server.nextRequest();
  for (const f of response('r1', '', ['c1', 'notify', { msg: 'hi' }])) await run.send(f);
  const got = await arrived;
  await run.waitFor(() => results(run.upstream).length === 1, 'the acknowledgement');
  // The webhook has not answered (it never will), yet the model already has its result.
  t.like(results(run.upstream)[0], { result: TOOL_DISPATCH_DEFAULTS.acknowledgement, isError: false });
  t.false(JSON.parse(got.body).tool_call_message.response_required);
  await run.stop();
});

test('a waiting webhook result that arrives after the user interrupted still enters the context', async (t) => {
  const server = await heldWebhook();
  t.teardown(() => server.close());
  const { run } = await startToolSession([webhookTool('order_status', server.url(), true)]);
  const arrived = server.nextRequest();
  for (const f of response('r1', '', ['c1', 'order_status', {}])) await run.send(f);
  await arrived;
  await run.send(userStarted());
  await run.send(interruption());
  t.deepEqual(results(run.upstream), [], 'no result before the webhook answers');
  server.release({ result: 'late but valid' });
  await run.waitFor(() => results(run.upstream).length === 1, 'the late result');
  const [late] = results(run.upstream);
  t.like(late, { toolCallId: 'c1', result: 'late but valid', isError: false });
  t.false(late!.runLlm, 'the user spoke since: the model uses the result when it answers them');
  await run.stop();
});

test('a waiting webhook result after the bot started speaking is kept for the next turn', async (t) => {
  const server = await heldWebhook();
  t.teardown(() => server.close());
  const { run } = await startToolSession([webhookTool('order_status', server.url(), true)]);
  const arrived = server.nextRequest();
  for (const f of response('r1', '', ['c1', 'order_status', {}])) await run.send(f);
  await arrived;
  await run.sendUpstream(botStarted());
  server.release({ result: 'done' });
  await run.waitFor(() => results(run.upstream).length === 1, 'the result');
  t.like(results(run.upstream)[0], { result: 'done', runLlm: false });
  await run.stop();
});

test('several waiting webhooks of one response run the model once, after the last result', async (t) => {
  const slow = await heldWebhook();
  const fast = await startLocalWebhook((_r, res) => json(res, 200, { result: 'fast' }));
  t.teardown(() => Promise.all([slow.close(), fast.close()]));
  const { run } = await startToolSession([webhookTool('slow_tool', slow.url(), true), webhookTool('fast_tool', fast.url(), true)]);
  const arrived = slow.nextRequest();
  for (const f of response('r1', '', ['c1', 'slow_tool', {}], ['c2', 'fast_tool', {}])) await run.send(f);
  await arrived;
  await run.waitFor(() => results(run.upstream).length === 1, 'the fast result');
  slow.release({ result: 'slow' });
  await run.waitFor(() => results(run.upstream).length === 2, 'the slow result');
  t.deepEqual(results(run.upstream).map((r) => [r.result, r.runLlm]), [
    ['fast', false],
    ['slow', true],
  ]);
  await run.stop();
});

test('a webhook refused at call time (DNS rebinding) is an error result and the tool is dropped for the session', async (t) => {
  const server = await startLocalWebhook((_r, res) => json(res, 200, { result: 'must not be reached' }));
  t.teardown(() => server.close());
  const answers = ['127.0.0.1', '10.0.0.1'];
  const resolver: HostResolver = async () => [{ address: answers.shift() ?? '10.0.0.1', family: 4 }];
  const { run, toolset, logger } = await startToolSession([webhookTool('order_status', `http://rebind.invalid:${server.port}/hook`, true)], {
    webhooks: { resolver },
  });
  t.true(toolset.tools.has('order_status'), 'allowed at session start');
  for (const f of response('r1', '', ['c1', 'order_status', {}])) await run.send(f);
  await run.waitFor(() => results(run.upstream).length === 1, 'the refusal');
  t.like(results(run.upstream)[0], { isError: true, result: 'Tool "order_status" is unavailable: its webhook address is not allowed.' });
  t.true(logger.entries.some((e) => e.level === 'warn' && /10\.0\.0\.1/.test(String(e.fields['reason']))));

  for (const f of response('r2', '', ['c2', 'order_status', { again: true }])) await run.send(f);
  t.like(results(run.upstream)[1], { toolCallId: 'c2', isError: true, result: 'No tool named "order_status" is available.' });
  t.is(server.received.length, 0);
  await run.stop();
});

test('ending the session abandons a waiting webhook without a late result', async (t) => {
  const server = await heldWebhook();
  t.teardown(() => server.close());
  const { run } = await startToolSession([webhookTool('order_status', server.url(), true)]);
  const arrived = server.nextRequest();
  for (const f of response('r1', '', ['c1', 'order_status', {}])) await run.send(f);
  await arrived;
  await run.worker.end('bye');
  t.deepEqual(run.outcome(), { how: 'ended', reason: 'bye' });
  await server.closed; // the request was aborted: the client hung up before any answer
  t.deepEqual(results(run.upstream), []);
});

test('a webhook host that does not resolve at call time is an error result and the tool stays', async (t) => {
  const server = await startLocalWebhook((_r, res) => json(res, 200, { result: 'second try' }));
  t.teardown(() => server.close());
  let lookups = 0;
  const resolver: HostResolver = async () => {
    if (++lookups === 2) throw Object.assign(new Error('EAI_AGAIN'), { code: 'EAI_AGAIN' });
    return [{ address: '127.0.0.1', family: 4 }];
  };
  const { run } = await startToolSession([webhookTool('order_status', `http://flaky.invalid:${server.port}/hook`, true)], { webhooks: { resolver } });
  for (const f of response('r1', '', ['c1', 'order_status', { n: 1 }])) await run.send(f);
  await run.waitFor(() => results(run.upstream).length === 1, 'the DNS failure');
  t.like(results(run.upstream)[0], { isError: true, result: 'Tool "order_status" failed: its webhook host could not be resolved.' });
  for (const f of response('r2', '', ['c2', 'order_status', { n: 2 }])) await run.send(f);
  await run.waitFor(() => results(run.upstream).length === 2, 'the retry');
  t.like(results(run.upstream)[1], { isError: false, result: 'second try' });
  t.is(server.received.length, 1);
  await run.stop();
});
