/**
 * The webhook rules of the spec as the model experiences them: what a tool result says for each
 * kind of answer a real local HTTP server gives (result key, whole body, 204, empty, redirects,
 * errors, non-JSON, huge bodies, silence), the 30 s timeout on the virtual clock, the exact
 * headers sent (no signature), and fire-and-forget ignoring whatever comes back.
 */
import test from 'ava';
import type http from 'node:http';
import { VirtualClock } from '../../core/testing/index.ts';
import { TOOL_DISPATCH_DEFAULTS } from '../../processors/tools/tool-dispatcher.ts';
import { END_CALL_TOOL } from '../../processors/tools/agent-tool.ts';
import { until } from '../../testing/until.ts';
import { WebhookClient } from '../../processors/tools/webhook-client.ts';
import { botStarted, botStopped, ofType, response, userStarted, userStopped } from './dispatcher-driver.ts';
import { json, startLocalWebhook, type Handler } from './local-webhook.ts';
import { SESSION, startToolSession, webhookTool } from './tool-session.ts';

const results = (frames: Parameters<typeof ofType>[0]) => ofType(frames, 'tool-call-result');

/** One waiting webhook call against a server with `handler`; returns the result the model gets. */
async function callOnce(handler: Handler, options: { maxResponseBytes?: number } = {}) {
  const server = await startLocalWebhook(handler);
  try {
    const { run } = await startToolSession([webhookTool('lookup', server.url(), true)], { webhooks: options });
    for (const f of response('r1', '', ['c1', 'lookup', { id: 7 }])) await run.send(f);
    await run.waitFor(() => results(run.upstream).length === 1, 'the result');
    await run.stop();
    return { result: results(run.upstream)[0]!, received: server.received.length };
  } finally {
    await server.close();
  }
}

const raw = (status: number, body = '', headers: http.OutgoingHttpHeaders = {}): Handler => (_r, res) => res.writeHead(status, headers).end(body);

test('wait_for_response: the result is the body\'s result key, else the whole JSON body; 204 and empty bodies are an empty result', async (t) => {
  const cases: [string, Handler, unknown][] = [
    ['result key', (_r, res) => json(res, 200, { result: { status: 'shipped' }, debug: 'not for the model' }), { status: 'shipped' }],
    ['result key holding null', (_r, res) => json(res, 200, { result: null }), null],
    ['object without result key', (_r, res) => json(res, 201, { status: 'shipped', eta: 'Monday' }), { status: 'shipped', eta: 'Monday' }],
    ['array body', (_r, res) => json(res, 200, ['a', 'b']), ['a', 'b']],
    ['string body', (_r, res) => json(res, 200, 'plain'), 'plain'],
    ['number body', (_r, res) => json(res, 200, 42), 42],
    ['204', raw(204), ''],
    ['empty 200', raw(200, '', { 'Content-Type': 'application/json' }), ''],
    ['whitespace 200', raw(200, ' \n ', { 'Content-Type': 'application/json' }), ''],
  ];
  for (const [label, handler, expected] of cases) {
    const { result } = await callOnce(handler);
    t.deepEqual([result.isError, result.result], [false, expected], label);
    t.true(result.runLlm, `${label}: the silent agent speaks about it in the same turn`);
  }
});

test('wait_for_response: non-2xx, unparseable, oversized and failed answers give the model an error result', async (t) => {
  const cases: [string, Handler, RegExp][] = [
    ['500', (_r, res) => json(res, 500, { result: 'must not be used' }), /^Tool "lookup" failed: webhook answered HTTP 500\.$/],
    ['404', raw(404, 'not found'), /webhook answered HTTP 404/],
    ['400 with a result key', (_r, res) => json(res, 400, { result: 'must not be used' }), /webhook answered HTTP 400/],
    ['HTML body', raw(200, '<h1>ok</h1>', { 'Content-Type': 'text/html' }), /webhook response is not valid JSON/],
    ['truncated JSON', raw(200, '{"result": "hal', { 'Content-Type': 'application/json' }), /webhook response is not valid JSON/],
    ['huge body', (_r, res) => json(res, 200, { result: 'x'.repeat(4096) }), /exceeds the 1000 byte limit/],
    ['connection reset', (_r, res) => res.socket?.destroy(), /webhook request failed: ECONNRESET/],
  ];
  for (const [label, handler, expected] of cases) {
    const { result } = await callOnce(handler, { maxResponseBytes: 1000 });
    t.true(result.isError, label);
    t.regex(String(result.result), expected, label);
  }
});

test('redirects are not followed: every 3xx is an error result and the target is never called', async (t) => {
  const target = await startLocalWebhook((_r, res) => json(res, 200, { result: 'secret from the redirect target' }));
  t.teardown(() => target.close());
  for (const status of [301, 302, 303, 307, 308]) {
    const { result, received } = await callOnce(raw(status, '', { Location: target.url('/internal') }));
    t.is(received, 1, `${status}: the webhook itself was called`);
    t.true(result.isError, `${status}`);
    t.is(result.result, `Tool "lookup" failed: webhook answered with a redirect (HTTP ${status} to ${target.url('/internal')}); redirects are not followed.`);
  }
  t.is(target.received.length, 0, 'the redirect target was never reached');
});

test('a webhook that does not answer within 30 seconds gives the model an error result (virtual clock, default timeout)', async (t) => {
  const held: http.ServerResponse[] = [];
  const server = await startLocalWebhook((_r, res) => held.push(res));
  t.teardown(() => server.close());
  const clock = new VirtualClock();
  const { run } = await startToolSession([webhookTool('lookup', server.url(), true)], { clock, webhooks: { clock } });
  const arrived = server.nextRequest();
  for (const f of response('r1', '', ['c1', 'lookup', {}])) await run.send(f);
  await arrived;

  await clock.advance(29_999);
  t.deepEqual(results(run.upstream), [], 'still waiting at 29.999 s');
  await clock.advance(1);
  await run.waitFor(() => results(run.upstream).length === 1, 'the timeout result', 100);
  t.like(results(run.upstream)[0], { isError: true, result: 'Tool "lookup" failed: webhook did not answer within 30000 ms.' });
  await run.stop();
});

test('webhooks are unsigned: exactly the documented headers are sent', async (t) => {
  const server = await startLocalWebhook((_r, res) => json(res, 200, { result: 'ok' }));
  t.teardown(() => server.close());
  const client = new WebhookClient({ allowedRanges: ['127.0.0.1/32'] });
  const request = { name: 'lookup', toolCallId: 'c1', arguments: '{}', responseRequired: true, metadata: SESSION };
  t.like(await client.send(await client.resolve(server.url()), request), { ok: true });
  const { headers } = server.received[0]!;
  t.deepEqual(Object.keys(headers).sort(), ['accept', 'connection', 'content-length', 'content-type', 'host', 'user-agent']);
  t.like(headers, { 'content-type': 'application/json', accept: 'application/json', 'user-agent': 'svc-tool-webhook/1' });
});

test('fire-and-forget: whatever the webhook answers is ignored; the model only gets the acknowledgement', async (t) => {
  const answers: Handler[] = [
    (_r, res) => json(res, 200, { result: 'IGNORED RESULT' }),
    (_r, res) => json(res, 500, { error: 'IGNORED ERROR' }),
    raw(200, 'not json at all'),
  ];
  const server = await startLocalWebhook((r, res) => answers[JSON.parse(r.body).tool_call_message.tool_call_id.slice(1) - 1]!(r, res));
  t.teardown(() => server.close());
  const { run } = await startToolSession([webhookTool('notify', server.url(), false)]);
  for (const f of response('r1', '', ['c1', 'notify', { n: 1 }], ['c2', 'notify', { n: 2 }], ['c3', 'notify', { n: 3 }])) await run.send(f);
  await run.waitFor(() => server.received.length === 3, 'the three deliveries');
  await run.settle(100);
  t.deepEqual(
    results(run.upstream).map((r) => [r.toolCallId, r.result, r.isError]),
    ['c1', 'c2', 'c3'].map((id) => [id, TOOL_DISPATCH_DEFAULTS.acknowledgement, false]),
  );
  t.true(server.received.every((r) => JSON.parse(r.body).tool_call_message.response_required === false));
  await run.stop();
});

test('fire-and-forget with end_call in the same response: the delivery is not cut short by the hang-up it causes', async (t) => {
  // The answer comes later than the hang-up (which is at once: no text, nothing playing).
  const server = await startLocalWebhook((_r, res) => void setTimeout(() => json(res, 200, { ok: true }), 200));
  t.teardown(() => server.close());
  const { run, logger } = await startToolSession([webhookTool('save_lead', server.url(), false)]);
  for (const f of response('r1', '', ['c1', 'save_lead', { email: 'a@example.org' }], ['c2', END_CALL_TOOL, {}])) await run.send(f);
  await run.waitFor(() => run.outcome() !== undefined, 'the hang-up');
  t.deepEqual(run.outcome(), { how: 'ended', reason: 'end_call' });
  await until(() => server.received.length === 1, { timeoutMs: 5_000, what: 'the lead delivered after the session ended' });
  t.like(JSON.parse(server.received[0]!.body).tool_call_message, { name: 'save_lead', response_required: false });
  t.regex(JSON.stringify(JSON.parse(server.received[0]!.body).tool_call_message.parameters), /a@example.org/);
  await new Promise((resolve) => setTimeout(resolve, 400)); // its answer came and was read
  t.false(logger.entries.some((e) => /fire-and-forget webhook failed/.test(e.message)), JSON.stringify(logger.entries));
});

test('a result longer than maxResultChars enters the context cut, with a note saying so; shorter ones are whole', async (t) => {
  const long = 'x'.repeat(100_000);
  const { result } = await callOnce((_r, res) => json(res, 200, { result: long }));
  t.is(typeof result.result, 'string');
  const text = result.result as string;
  t.is(text.slice(0, TOOL_DISPATCH_DEFAULTS.maxResultChars), long.slice(0, TOOL_DISPATCH_DEFAULTS.maxResultChars));
  t.true(text.endsWith(`[The tool's result was 100000 characters long; only the first ${TOOL_DISPATCH_DEFAULTS.maxResultChars} are shown.]`));
  t.true(text.length < TOOL_DISPATCH_DEFAULTS.maxResultChars + 200);
  t.false(result.isError);
  // A JSON result is measured as the JSON the model reads; one within the limit stays an object.
  const small = await callOnce((_r, res) => json(res, 200, { result: { items: [1, 2, 3] } }));
  t.deepEqual(small.result.result, { items: [1, 2, 3] });
});

test('wait_for_response: the agent waits, the result always enters the context, and is spoken in the same turn only if the agent had not started speaking', async (t) => {
  type Step = (run: Awaited<ReturnType<typeof startToolSession>>['run']) => Promise<void>;
  const cases: [string, string, Step, boolean][] = [
    ['silent agent', '', async () => {}, true],
    ['the response itself had text', 'One moment, I am checking.', async () => {}, false],
    ['the bot started speaking meanwhile', '', (run) => run.sendUpstream(botStarted()), false],
    ['the bot spoke and stopped meanwhile', '', async (run) => { await run.sendUpstream(botStarted()); await run.sendUpstream(botStopped()); }, false],
    ['the user started a new turn meanwhile', '', async (run) => { await run.send(userStarted()); await run.send(userStopped()); }, false],
  ];
  for (const [label, text, meanwhile, sameTurn] of cases) {
    const held: http.ServerResponse[] = [];
    const server = await startLocalWebhook((_r, res) => held.push(res));
    const { run } = await startToolSession([webhookTool('lookup', server.url(), true)]);
    const arrived = server.nextRequest();
    for (const f of response('r1', text, ['c1', 'lookup', {}])) await run.send(f);
    await arrived;
    await run.settle(20);
    t.deepEqual(results(run.upstream), [], `${label}: nothing before the webhook answers`);
    await meanwhile(run);
    json(held.shift()!, 200, { result: `answer for ${label}` });
    await run.waitFor(() => results(run.upstream).length === 1, `${label}: the result`);
    t.like(results(run.upstream)[0], { toolCallId: 'c1', result: `answer for ${label}`, isError: false, runLlm: sameTurn }, label);
    await run.stop();
    await server.close();
  }
});
