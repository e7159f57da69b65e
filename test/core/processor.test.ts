import test from 'ava';
import { FrameProcessor, frame, signal, type Direction, type Frame } from '../../core/index.ts';
import { frameTypes, runProcessorTest } from '../../core/testing/index.ts';
import { SlowProcessor, text, texts } from './helpers.ts';

test('a pass-through processor forwards data frames in order', async (t) => {
  const { downstream } = await runProcessorTest(new FrameProcessorPass(), [text('a'), text('b'), text('c')]);
  t.deepEqual(texts(downstream), ['a', 'b', 'c']);
});

class FrameProcessorPass extends FrameProcessor {}

test('system frames overtake queued data frames', async (t) => {
  const slow = new SlowProcessor(100);
  const { downstream } = await runProcessorTest(slow, [text('a'), text('b'), signal('user-started-speaking'), { sleepMs: 250 }]);
  t.deepEqual(frameTypes(downstream), ['user-started-speaking', 'text', 'text']);
  t.deepEqual(texts(downstream), ['a', 'b']);
});

test('interruption drops exactly the interruptible queued frames and aborts the in-flight one', async (t) => {
  const slow = new SlowProcessor(100);
  const result = frame('tool-call-result', { toolCallId: 'c1', name: 'f', arguments: '{}', result: 1, isError: false, runLlm: false });
  const { downstream } = await runProcessorTest(slow, [
    text('in-flight'),
    text('queued-1'),
    result,
    text('queued-2'),
    text('marked', { uninterruptible: true }),
    { sleepMs: 10 },
    signal('interruption'),
    { sleepMs: 500 },
  ]);
  t.deepEqual(slow.aborted, ['in-flight']);
  t.deepEqual(frameTypes(downstream), ['interruption', 'tool-call-result', 'text']);
  t.deepEqual(texts(downstream), ['marked']);
  t.is(slow.queuedFrames, 0);
});

test('frames queued after an interruption are processed normally', async (t) => {
  const slow = new SlowProcessor(50);
  const { downstream } = await runProcessorTest(slow, [text('old'), signal('interruption'), text('new'), { sleepMs: 100 }]);
  t.deepEqual(texts(downstream), ['new']);
});

test('an end frame drains everything queued before it', async (t) => {
  const slow = new SlowProcessor(100);
  const { downstream, outcome } = await runProcessorTest(slow, [text('1'), text('2'), text('3')]);
  t.deepEqual(texts(downstream), ['1', '2', '3']);
  t.is(outcome?.how, 'ended');
});

test('a cancel frame does not drain: queued frames are dropped', async (t) => {
  const slow = new SlowProcessor(100);
  const { downstream, outcome } = await runProcessorTest(
    slow,
    [text('1'), text('2'), text('3'), { sleepMs: 10 }, frame('cancel', { reason: 'test' })],
    { sendEnd: false },
  );
  t.is(outcome?.how, 'cancelled');
  t.deepEqual(texts(downstream), []);
  t.deepEqual(frameTypes(downstream), ['cancel']);
  t.deepEqual(slow.aborted, ['1']);
});

class Thrower extends FrameProcessor {
  protected override process(f: Frame, direction: Direction): void | Promise<void> {
    if (f.type === 'text' && f.text === 'boom') throw new Error('sync failure');
    if (f.type === 'text' && f.text === 'later') return Promise.reject(new Error('async failure'));
    this.push(f, direction);
  }
}

test('a throwing processor yields an upstream error frame and keeps processing', async (t) => {
  const { downstream, upstream, events } = await runProcessorTest(new Thrower({ name: 'thrower' }), [
    text('boom'),
    text('later'),
    text('fine'),
  ]);
  t.deepEqual(texts(downstream), ['fine']);
  const errors = upstream.filter((f) => f.type === 'error');
  t.deepEqual(
    errors.map((f) => (f.type === 'error' ? [f.message, f.processor, f.fatal] : [])),
    [
      ['sync failure', 'thrower', false],
      ['async failure', 'thrower', false],
    ],
  );
  t.is(events.filter((e) => e.type === 'error').length, 2);
});

test('an async start hook holds ordered frames until it completes', async (t) => {
  class SlowStart extends FrameProcessor {
    ready = false;
    protected override async onStart(): Promise<void> {
      await this.clock.sleep(200);
      this.ready = true;
    }
    protected override process(f: Frame, d: Direction): void {
      this.push(f.type === 'text' ? text(`${f.text}:${this.ready}`) : f, d);
    }
  }
  const { downstream } = await runProcessorTest(new SlowStart(), [text('x'), { sleepMs: 300 }]);
  t.deepEqual(texts(downstream), ['x:true']);
});

test('upstream frames travel up through the processor', async (t) => {
  const { upstream, downstream } = await runProcessorTest(new FrameProcessorPass(), [{ upstream: text('up') }]);
  t.deepEqual(texts(upstream), ['up']);
  t.deepEqual(texts(downstream), []);
});

test('an end travelling upstream is a request to end: lifecycle hooks run once, for the real end', async (t) => {
  const hooks: string[] = [];
  class Hooked extends FrameProcessor {
    protected override onEnd(): void {
      hooks.push('end');
    }
  }
  const { upstream, outcome } = await runProcessorTest(new Hooked(), [{ upstream: frame('end', { reason: 'hangup' }) }], { ignore: ['start', 'heartbeat', 'metrics'] });
  t.deepEqual(frameTypes(upstream), ['end']);
  t.deepEqual(outcome, { how: 'ended', reason: 'hangup' });
  t.deepEqual(hooks, ['end']);
});

test('a cancel travelling upstream reaches the worker, which cancels; the processor is cancelled once', async (t) => {
  const hooks: string[] = [];
  class Hooked extends FrameProcessor {
    protected override onCancel(): void {
      hooks.push('cancel');
    }
  }
  const { upstream, outcome } = await runProcessorTest(new Hooked(), [{ upstream: frame('cancel', { reason: 'fatal' }) }], { sendEnd: false, ignore: ['start'] });
  t.deepEqual(frameTypes(upstream), ['cancel']);
  t.is(outcome?.how, 'cancelled');
  t.deepEqual(hooks, ['cancel']);
});
