import test from 'ava';
import type { Direction, Frame } from '../../core/frames.ts';
import { FrameProcessor } from '../../core/processor.ts';
import { TOOL_DISPATCH_DEFAULTS } from '../../processors/tools/tool-dispatcher.ts';
import { botStarted, botStopped, interruption, ofType, response, toolCalls, userStarted, userStopped } from './dispatcher-driver.ts';
import { json, startLocalWebhook } from './local-webhook.ts';
import { clientTool, startToolSession, webhookTool } from './tool-session.ts';

test('client delivery sends the svcToolCall message with parsed arguments and waits for nothing', async (t) => {
  const { run } = await startToolSession([clientTool('open_page')]);
  for (const f of response('r1', '', ['c1', 'open_page', { q: 'pricing', n: 2 }])) await run.send(f);

  t.deepEqual(
    ofType(run.downstream, 'client-message').map((m) => m.message),
    [{ type: 'tool-call', function_name: 'open_page', tool_call_id: 'c1', arguments: { q: 'pricing', n: 2 } }],
  );
  t.true(ofType(run.downstream, 'client-message')[0]!.uninterruptible === true);
  const [progress] = ofType(run.downstream, 'tool-call-in-progress');
  t.is(progress?.toolCallId, 'c1');
  const [result] = ofType(run.upstream, 'tool-call-result');
  t.like(result, { toolCallId: 'c1', name: 'open_page', result: TOOL_DISPATCH_DEFAULTS.acknowledgement, isError: false, runLlm: true });
  await run.stop();
});

test('the tool-calls frame goes on downstream, uninterruptible, and every result goes up to the LLM', async (t) => {
  const { run } = await startToolSession([clientTool('open_page')]);
  for (const f of response('r1', '', ['c1', 'open_page', {}], ['c2', 'nope', {}])) await run.send(f);
  t.deepEqual(run.downstream.map((f) => f.type), ['llm-response-start', 'tool-calls', 'tool-call-in-progress', 'client-message', 'llm-response-end']);
  t.true(ofType(run.downstream, 'tool-calls')[0]!.uninterruptible === true);
  t.deepEqual(ofType(run.downstream, 'tool-call-result'), []);
  t.deepEqual(ofType(run.upstream, 'tool-call-result').map((r) => r.toolCallId).sort(), ['c1', 'c2']);
  await run.stop();
});

test('at most 3 calls are executed per response and the extras tell the model to answer with speech', async (t) => {
  const { run } = await startToolSession([clientTool('open_page')]);
  const calls: [string, string, unknown][] = [1, 2, 3, 4, 5].map((i) => [`c${i}`, 'open_page', { q: `page ${i}` }]);
  for (const f of response('r1', '', ...calls)) await run.send(f);

  t.deepEqual(ofType(run.downstream, 'client-message').map((m) => m.message['tool_call_id']), ['c1', 'c2', 'c3']);
  t.deepEqual(ofType(run.downstream, 'tool-call-in-progress').map((f) => f.toolCallId), ['c1', 'c2', 'c3']);
  const results = ofType(run.upstream, 'tool-call-result');
  t.deepEqual(results.map((r) => r.toolCallId).sort(), ['c1', 'c2', 'c3', 'c4', 'c5']);
  for (const r of results.filter((r) => r.toolCallId === 'c4' || r.toolCallId === 'c5')) {
    t.true(r.isError);
    t.regex(String(r.result), /Answer the user with speech/);
  }
  t.deepEqual(results.map((r) => r.runLlm), [false, false, false, false, true], 'the model runs once, after the last result');
  await run.stop();
});

test('identical consecutive calls within one turn are delivered once', async (t) => {
  const { run } = await startToolSession([clientTool('open_page')]);
  // Same tool, same arguments (key order differs), within a response and again in the next response.
  for (const f of response('r1', '', ['c1', 'open_page', { q: 'a', n: 1 }], ['c2', 'open_page', { n: 1, q: 'a' }])) await run.send(f);
  for (const f of response('r2', '', ['c3', 'open_page', { q: 'a', n: 1 }])) await run.send(f);
  t.deepEqual(ofType(run.downstream, 'client-message').map((m) => m.message['tool_call_id']), ['c1']);
  const dup = ofType(run.upstream, 'tool-call-result').filter((r) => r.toolCallId !== 'c1');
  t.deepEqual(dup.map((r) => [r.toolCallId, r.isError, r.result]), [
    ['c2', false, 'Same call as c1, which was already delivered; it was not repeated.'],
    ['c3', false, 'Same call as c1, which was already delivered; it was not repeated.'],
  ]);

  // Not consecutive (A, B, A) or not the same arguments: delivered each time.
  for (const f of response('r3', '', ['c4', 'open_page', { q: 'b' }], ['c5', 'open_page', { q: 'a', n: 1 }])) await run.send(f);
  // A new user turn: the same call is delivered again.
  await run.send(userStarted());
  for (const f of response('r4', '', ['c6', 'open_page', { q: 'a', n: 1 }])) await run.send(f);
  t.deepEqual(ofType(run.downstream, 'client-message').map((m) => m.message['tool_call_id']), ['c1', 'c4', 'c5', 'c6']);
  await run.stop();
});

test('a call to an unknown or disabled tool is an error result and nothing is delivered', async (t) => {
  const { run } = await startToolSession([clientTool('open_page'), clientTool('hidden_tool', false)]);
  for (const f of response('r1', '', ['c1', 'no_such_tool', {}], ['c2', 'hidden_tool', {}])) await run.send(f);
  t.deepEqual(ofType(run.downstream, 'client-message'), []);
  t.deepEqual(ofType(run.downstream, 'tool-call-in-progress'), []);
  t.deepEqual(
    ofType(run.upstream, 'tool-call-result').map((r) => [r.toolCallId, r.isError, r.result]),
    [
      ['c1', true, 'No tool named "no_such_tool" is available.'],
      ['c2', true, 'No tool named "hidden_tool" is available.'],
    ],
  );
  await run.stop();
});

test('arguments that are not a JSON object are an error result and nothing is delivered', async (t) => {
  const { run } = await startToolSession([clientTool('open_page')]);
  for (const f of response('r1', '', ['c1', 'open_page', '{"q": "unterminated'], ['c2', 'open_page', '[1,2]'], ['c3', 'open_page', ''])) {
    await run.send(f);
  }
  const results = ofType(run.upstream, 'tool-call-result');
  t.like(results.find((r) => r.toolCallId === 'c1'), { isError: true, result: 'Tool "open_page" was not called: the arguments are not valid JSON.' });
  t.like(results.find((r) => r.toolCallId === 'c2'), { isError: true, result: 'Tool "open_page" was not called: the arguments must be a JSON object.' });
  // An empty argument string is a call without arguments.
  t.deepEqual(ofType(run.downstream, 'client-message').map((m) => m.message['arguments']), [{}]);
  await run.stop();
});

test('in third_party mode tools are stored but never dispatched', async (t) => {
  const server = await startLocalWebhook((_r, res) => json(res, 200, { result: 'should never be called' }));
  try {
    const { run, toolset } = await startToolSession([clientTool('open_page'), webhookTool('lookup', server.url(), true)], { mode: 'third_party' });
    t.deepEqual(toolset.definitions, []);
    await run.send(toolCalls('r1', ['c1', 'open_page', {}], ['c2', 'lookup', {}]));
    await run.settle(50);
    t.is(server.received.length, 0);
    t.deepEqual(ofType(run.downstream, 'client-message'), []);
    t.deepEqual(ofType(run.downstream, 'tool-call-in-progress'), []);
    t.true(ofType(run.upstream, 'tool-call-result').every((r) => r.isError && !r.runLlm));
    await run.stop();
  } finally {
    await server.close();
  }
});

test('runLlm is false when the response already had text to speak', async (t) => {
  const { run } = await startToolSession([clientTool('open_page')]);
  for (const f of response('r1', 'Opening it for you.', ['c1', 'open_page', {}])) await run.send(f);
  t.false(ofType(run.upstream, 'tool-call-result')[0]!.runLlm);
  await run.stop();
});

test('runLlm is false when the bot already started speaking in this turn, true again after the user speaks', async (t) => {
  const { run } = await startToolSession([clientTool('open_page')]);
  await run.sendUpstream(botStarted());
  for (const f of response('r1', '', ['c1', 'open_page', { q: '1' }])) await run.send(f);
  await run.sendUpstream(botStopped());
  await run.send(userStarted());
  await run.send(userStopped());
  for (const f of response('r2', '', ['c2', 'open_page', { q: '2' }])) await run.send(f);
  await run.sendUpstream(botStarted());
  await run.sendUpstream(botStopped());
  for (const f of response('r3', '', ['c3', 'open_page', { q: '3' }])) await run.send(f);
  t.deepEqual(ofType(run.upstream, 'tool-call-result').map((r) => [r.toolCallId, r.runLlm]), [
    ['c1', false],
    ['c2', true],
    ['c3', false],
  ]);
  t.true(run.upstream.some((f) => f.type === 'bot-started-speaking'), 'speaking frames pass through upstream');
  await run.stop();
});

test('runLlm is false while the user is speaking', async (t) => {
  const { run } = await startToolSession([clientTool('open_page')]);
  await run.send(userStarted());
  for (const f of response('r1', '', ['c1', 'open_page', {}])) await run.send(f);
  t.false(ofType(run.upstream, 'tool-call-result')[0]!.runLlm);
  await run.stop();
});

/** Stands in for a TTS busy synthesising: each text frame holds the ordered lane until interrupted. */
class BusySpeaker extends FrameProcessor {
  protected override async process(f: Frame, direction: Direction, signal: AbortSignal): Promise<void> {
    if (f.type === 'llm-text') await this.clock.sleep(60_000, signal);
    this.push(f, direction);
  }
}

test('tool frames queued behind a busy speaker survive an interruption', async (t) => {
  const { run } = await startToolSession([clientTool('open_page')], { below: [new BusySpeaker()] });
  for (const f of response('r1', 'Let me open that.', ['c1', 'open_page', {}])) await run.send(f);
  t.false(run.downstream.some((f) => f.type === 'client-message'), 'held behind the speaker');
  await run.send(interruption());
  await run.waitFor(() => run.downstream.some((f) => f.type === 'client-message'), 'the client message');
  const types = run.downstream.map((f) => f.type);
  for (const type of ['tool-calls', 'tool-call-in-progress', 'client-message'] as const) t.true(types.includes(type), type);
  t.is(ofType(run.upstream, 'tool-call-result').length, 1);
  t.false(types.includes('llm-response-end'), 'an interruptible frame in the same queue was dropped');
  t.false(types.includes('llm-text'), 'the text being spoken was abandoned');
  await run.stop();
});

test('a malformed tool-calls frame from a buggy plugin is answered, not a crash', async (t) => {
  const { run } = await startToolSession([clientTool('open_page')]);
  const broken = { ...toolCalls('r1', ['c1', 'open_page', '{}']) } as Record<string, unknown>;
  await run.send({ ...broken, calls: [{ toolCallId: 'c1', name: 'open_page', arguments: { q: 1 } }, { toolCallId: 'c2' }] } as never);
  await run.send({ ...broken, calls: 'nonsense' } as never);
  t.deepEqual(
    ofType(run.upstream, 'tool-call-result').map((r) => [r.toolCallId, r.isError]),
    [
      ['c1', true],
      ['c2', true],
    ],
  );
  t.deepEqual(ofType(run.upstream, 'error'), []);
  t.deepEqual(ofType(run.downstream, 'client-message'), []);
  await run.stop();
});

test('a model that keeps calling tools in a silent turn is run again at most 5 times', async (t) => {
  const { run, logger } = await startToolSession([clientTool('open_page')]);
  for (let i = 1; i <= 7; i++) for (const f of response(`r${i}`, '', [`c${i}`, 'open_page', { q: 'same' }])) await run.send(f);
  t.deepEqual(ofType(run.upstream, 'tool-call-result').map((r) => r.runLlm), [true, true, true, true, true, false, false]);
  t.is(ofType(run.downstream, 'client-message').length, 1, 'the repeated call was delivered once');
  t.true(logger.entries.some((e) => e.level === 'warn' && /rounds limit/.test(e.message)));
  // A new user turn starts a fresh count.
  await run.send(userStarted());
  await run.send(userStopped());
  for (const f of response('r8', '', ['c8', 'open_page', { q: 'other' }])) await run.send(f);
  t.true(ofType(run.upstream, 'tool-call-result').at(-1)!.runLlm);
  await run.stop();
});
