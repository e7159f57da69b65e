import test from 'ava';
import { spawn } from 'node:child_process';
import { getEventListeners } from 'node:events';
import { fileURLToPath } from 'node:url';
import {
  FrameProcessor,
  PipelineRunner,
  VirtualClock,
  frame,
  runBot,
  type Direction,
  type Frame,
  type FrameOf,
  type WorkerEvent,
} from '../../core/index.ts';
import { CaptureProcessor } from '../../core/testing/index.ts';
import { SlowProcessor, text, texts } from './helpers.ts';

/** Appends its tag to every text frame: shows the order the list runs in. */
class Tag extends FrameProcessor {
  constructor(private readonly tag: string) {
    super();
  }
  protected override process(f: Frame, direction: Direction): void {
    this.push(f.type === 'text' && direction === 'downstream' ? frame('text', { text: f.text + this.tag }) : f, direction);
  }
}

/** A processor whose end never completes (a provider that never acknowledges the close). */
class StuckOnEnd extends FrameProcessor {
  protected override onEnd(_f: FrameOf<'end'>): Promise<void> {
    return new Promise(() => undefined);
  }
}

// A cleaned-up processor has completed its subjects: nothing listens to it any more.
const closed = (ps: readonly FrameProcessor[]) => ps.every((p) => !p.downstream$.observed && !p.upstream$.observed);

test('a bot written as a list runs in list order, ends gracefully, and is torn down', async (t) => {
  const clock = new VirtualClock();
  const sink = new CaptureProcessor('downstream', new Set(['start', 'end', 'heartbeat', 'metrics']));
  const list = [new Tag('a'), new SlowProcessor(50), new Tag('b'), sink];
  const runner = new PipelineRunner(list, { clock, heartbeatMs: 100, idleTimeoutMs: 60_000 });
  const done = runner.run();
  runner.queueFrame(text('x'));
  runner.queueFrame(text('y'));
  void runner.end('done talking');
  await clock.advanceUntil(() => runner.worker.finished, 5000);
  t.deepEqual(await done, { how: 'ended', reason: 'done talking' });
  t.deepEqual(texts(sink.frames), ['xab', 'yab'], 'every frame crossed the list in order, and the end drained them');
  t.true(closed(list), 'every processor was cleaned up');
  t.is(clock.pendingTimers(), 0, 'no heartbeat, idle or end timer left');
});

test('cancel stops at once: in-flight work is aborted and queued frames dropped', async (t) => {
  const clock = new VirtualClock();
  const slow = new SlowProcessor(10_000);
  const sink = new CaptureProcessor('downstream', new Set(['start', 'cancel', 'heartbeat', 'metrics']));
  const runner = new PipelineRunner([slow, sink], { clock });
  const done = runner.run();
  runner.queueFrame(text('one'));
  runner.queueFrame(text('two'));
  await clock.advance(10);
  await runner.cancel('user left');
  t.deepEqual(await done, { how: 'cancelled', reason: 'user left' });
  t.deepEqual(slow.aborted, ['one']);
  t.deepEqual(texts(sink.frames), []);
  t.true(closed([slow, sink]));
  t.is(clock.pendingTimers(), 0);
});

test('aborting the caller\'s signal cancels the bot with its reason, and the abort listener is removed', async (t) => {
  const clock = new VirtualClock();
  const controller = new AbortController();
  const procs = [new Tag('a')];
  const done = runBot(procs, { clock, signal: controller.signal });
  await clock.advance(10);
  t.is(getEventListeners(controller.signal, 'abort').length, 1, 'the runner listens while the bot runs');
  controller.abort('shutting down');
  t.deepEqual(await done, { how: 'cancelled', reason: 'shutting down' });
  t.true(closed(procs));
  // A bot that ends by itself leaves no listener on a signal that outlives it.
  const longLived = new AbortController();
  const runner = new PipelineRunner([new Tag('c')], { clock, signal: longLived.signal });
  const ended = runner.run();
  void runner.end();
  await clock.advance(10);
  t.is((await ended).how, 'ended');
  t.is(getEventListeners(longLived.signal, 'abort').length, 0);
  // An already aborted signal cancels a bot before it does anything.
  const again = new AbortController();
  again.abort();
  t.deepEqual(await runBot([new Tag('b')], { clock, signal: again.signal }), { how: 'cancelled', reason: 'aborted' });
});

test('a graceful end that does not finish within endTimeoutMs is cancelled', async (t) => {
  const clock = new VirtualClock();
  const procs = [new StuckOnEnd(), new Tag('a')];
  const runner = new PipelineRunner(procs, { clock, endTimeoutMs: 2000, heartbeatMs: null, idleTimeoutMs: null });
  const done = runner.run();
  await clock.advance(0);
  void runner.end('bye');
  await clock.advance(1999);
  t.false(runner.worker.finished, 'still waiting for the end to drain');
  await clock.advance(1);
  const outcome = await done;
  t.is(outcome.how, 'cancelled');
  t.regex(outcome.reason ?? '', /bye: did not finish within 2000 ms/);
  t.true(closed(procs));
  t.is(clock.pendingTimers(), 0);
});

test('handled process signals: the first ends gracefully, a second cancels; listeners are removed after', async (t) => {
  // SIGUSR2 is emitted in-process (no real signal): the real SIGINT/SIGTERM path is the child-process test below.
  const before = process.listenerCount('SIGUSR2');
  const clock = new VirtualClock();
  const procs = [new StuckOnEnd()];
  const events: WorkerEvent['type'][] = [];
  const done = runBot(procs, { clock, handleSignals: ['SIGUSR2'], endTimeoutMs: null, heartbeatMs: null, idleTimeoutMs: null, onEvent: (e) => events.push(e.type) });
  await clock.advance(0);
  t.is(process.listenerCount('SIGUSR2'), before + 1);
  process.emit('SIGUSR2', 'SIGUSR2');
  await clock.advance(5000);
  t.deepEqual(events, ['started'], 'ending: the stuck processor holds the end, and no timer cancels it (endTimeoutMs: null)');
  process.emit('SIGUSR2', 'SIGUSR2');
  t.deepEqual(await done, { how: 'cancelled', reason: 'SIGUSR2' });
  t.deepEqual(events, ['started', 'finished']);
  t.is(process.listenerCount('SIGUSR2'), before, 'the runner removed its signal listener');
});

test('signals are not taken unless asked for', async (t) => {
  const before = process.listenerCount('SIGINT') + process.listenerCount('SIGTERM');
  const clock = new VirtualClock();
  const runner = new PipelineRunner([new Tag('a')], { clock });
  const done = runner.run();
  await clock.advance(0);
  t.is(process.listenerCount('SIGINT') + process.listenerCount('SIGTERM'), before);
  await runner.cancel();
  await done;
});

test('a bot script run with handleSignals ends gracefully on a real SIGTERM and exits on its own', async (t) => {
  const script = fileURLToPath(new URL('./runner-bot.ts', import.meta.url));
  const child = spawn(process.execPath, ['--import', 'tsx', script], { detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  t.teardown(() => {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // already gone
    }
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    const check = () => (stdout.includes('ready') ? resolve() : undefined);
    child.stdout.on('data', check);
    child.on('exit', () => reject(new Error(`the bot exited before it was ready: ${stderr}`)));
  });
  // Let it run a little: ticks and heartbeats flow, timers are live.
  await new Promise((r) => setTimeout(r, 200));
  child.kill('SIGTERM');
  const code = await exited;
  t.is(code, 0, stderr);
  const outcome = JSON.parse(stdout.trim().split('\n').at(-1)!);
  t.deepEqual(outcome, { how: 'ended', reason: 'SIGTERM' });
});

/** Closes a "connection" asynchronously when cancelled, as a provider processor does. */
class SlowToRelease extends FrameProcessor {
  closed = false;
  constructor(private readonly closeMs: number | null) {
    super();
  }
  protected override onCancel(): void {
    const ms = this.closeMs;
    this.releasing(ms === null ? new Promise(() => undefined) : this.clock.sleep(ms).then(() => void (this.closed = true)));
  }
}

test('run() resolves only once what processors close asynchronously is closed', async (t) => {
  const clock = new VirtualClock();
  const slow = new SlowToRelease(300);
  const runner = new PipelineRunner([slow], { clock, heartbeatMs: null, idleTimeoutMs: null });
  let resolved = false;
  const done = runner.run().then((o) => ((resolved = true), o));
  await clock.advance(0);
  void runner.cancel('bye');
  await clock.advance(299);
  t.false(resolved, 'the connection is still closing');
  t.false(slow.closed);
  await clock.advance(1);
  t.deepEqual(await done, { how: 'cancelled', reason: 'bye' });
  t.true(slow.closed);
  t.is(clock.pendingTimers(), 0);
});

test('a release that never completes holds run() for releaseTimeoutMs at most', async (t) => {
  const clock = new VirtualClock();
  const runner = new PipelineRunner([new SlowToRelease(null)], { clock, heartbeatMs: null, idleTimeoutMs: null, releaseTimeoutMs: 1000 });
  let resolved = false;
  const done = runner.run().then((o) => ((resolved = true), o));
  await clock.advance(0);
  void runner.cancel();
  await clock.advance(999);
  t.false(resolved);
  await clock.advance(1);
  t.is((await done).how, 'cancelled');
  t.is(clock.pendingTimers(), 0);
});
