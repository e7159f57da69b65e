import test from 'ava';
import { VirtualClock } from '../../core/testing/index.ts';
import { END_CALL_TOOL } from '../../processors/tools/agent-tool.ts';
import { TOOL_DISPATCH_DEFAULTS } from '../../processors/tools/tool-dispatcher.ts';
import { botStarted, botStopped, interruption, ofType, response, userStarted, type DispatcherRun } from './dispatcher-driver.ts';
import { clientTool, startToolSession } from './tool-session.ts';

const FAREWELL_TIMEOUT_MS = 5_000;

async function session(): Promise<DispatcherRun> {
  const { run } = await startToolSession([clientTool('open_page')], {
    clock: new VirtualClock(),
    dispatcher: { farewellTimeoutMs: FAREWELL_TIMEOUT_MS },
  });
  return run;
}

const hangUps = (run: DispatcherRun) => run.upstream.filter((f) => f.type === 'end');

test('end_call ends the conversation gracefully after the farewell has been spoken', async (t) => {
  const run = await session();
  for (const f of response('r1', 'Goodbye, have a nice day!', ['c1', END_CALL_TOOL, {}])) await run.send(f);
  t.like(ofType(run.upstream, 'tool-call-result')[0], {
    name: END_CALL_TOOL,
    result: TOOL_DISPATCH_DEFAULTS.endCallResult,
    isError: false,
    runLlm: false,
  });
  t.deepEqual(hangUps(run), [], 'not before the farewell is played');

  await run.sendUpstream(botStarted());
  await run.settle(1_000);
  t.deepEqual(hangUps(run), [], 'not while it is being played');

  await run.sendUpstream(botStopped());
  await run.waitFor(() => run.outcome() !== undefined, 'the worker to end');
  t.like(hangUps(run)[0], { reason: 'end_call' });
  t.deepEqual(run.outcome(), { how: 'ended', reason: 'end_call' });
});

test('end_call with nothing left to say hangs up at once', async (t) => {
  const run = await session();
  for (const f of response('r1', '', ['c1', END_CALL_TOOL, {}])) await run.send(f);
  await run.waitFor(() => run.outcome() !== undefined, 'the worker to end');
  t.deepEqual(run.outcome(), { how: 'ended', reason: 'end_call' });
});

test('end_call while the bot is still speaking hangs up when it stops', async (t) => {
  const run = await session();
  await run.sendUpstream(botStarted());
  for (const f of response('r1', '', ['c1', END_CALL_TOOL, {}])) await run.send(f);
  await run.settle(1_000);
  t.is(run.outcome(), undefined);
  await run.sendUpstream(botStopped());
  await run.waitFor(() => run.outcome() !== undefined, 'the worker to end');
  t.deepEqual(run.outcome(), { how: 'ended', reason: 'end_call' });
});

test('an interrupted end_call does not hang up after the user has spoken again', async (t) => {
  const run = await session();
  for (const f of response('r1', 'Goodbye!', ['c1', END_CALL_TOOL, {}])) await run.send(f);
  await run.sendUpstream(botStarted());
  await run.send(userStarted());
  await run.send(interruption());
  await run.sendUpstream(botStopped());
  await run.settle(FAREWELL_TIMEOUT_MS * 3);
  t.deepEqual(hangUps(run), []);
  t.is(run.outcome(), undefined);

  // The conversation goes on: the next call is dispatched as usual.
  for (const f of response('r2', '', ['c2', 'open_page', { q: 'still here' }])) await run.send(f);
  t.is(ofType(run.downstream, 'client-message').length, 1);
  await run.stop();
});

test('the user speaking before the farewell starts playing keeps the call open', async (t) => {
  const run = await session();
  for (const f of response('r1', 'Goodbye!', ['c1', END_CALL_TOOL, {}])) await run.send(f);
  await run.send(userStarted());
  await run.sendUpstream(botStarted());
  await run.sendUpstream(botStopped());
  await run.settle(FAREWELL_TIMEOUT_MS * 3);
  t.deepEqual(hangUps(run), []);
  t.is(run.outcome(), undefined);
  await run.stop();
});

test('a farewell that never starts playing still ends the call after the farewell timeout', async (t) => {
  const run = await session();
  for (const f of response('r1', 'Goodbye!', ['c1', END_CALL_TOOL, {}])) await run.send(f);
  await run.settle(FAREWELL_TIMEOUT_MS - 100);
  t.is(run.outcome(), undefined);
  await run.settle(200);
  await run.waitFor(() => run.outcome() !== undefined, 'the worker to end');
  t.deepEqual(run.outcome(), { how: 'ended', reason: 'end_call' });
});

test('other results of a response that ends the call do not run the model again', async (t) => {
  const run = await session();
  await run.sendUpstream(botStarted());
  for (const f of response('r1', '', ['c1', 'open_page', { q: 'receipt' }], ['c2', END_CALL_TOOL, {}])) await run.send(f);
  t.deepEqual(ofType(run.upstream, 'tool-call-result').map((r) => r.runLlm), [false, false]);
  await run.stop();
});
