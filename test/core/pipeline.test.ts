import test from 'ava';
import {
  FrameProcessor,
  ParallelPipeline,
  Pipeline,
  PipelineWorker,
  RecordingObserver,
  VirtualClock,
  frame,
  type Direction,
  type Frame,
} from '../../core/index.ts';
import { frameTypes, runProcessorTest } from '../../core/testing/index.ts';
import { SlowProcessor, text, texts } from './helpers.ts';

/** Appends a tag to every text frame it forwards. */
class Tagger extends FrameProcessor {
  constructor(private readonly tag: string) {
    super({ name: `Tagger(${tag})` });
  }
  protected override process(f: Frame, d: Direction): void {
    this.push(f.type === 'text' && d === 'downstream' ? text(`${f.text}${this.tag}`) : f, d);
  }
}

/** Swallows text frames whose text matches. */
class Dropper extends FrameProcessor {
  constructor(private readonly match: RegExp) {
    super();
  }
  protected override process(f: Frame, d: Direction): void {
    if (f.type === 'text' && this.match.test(f.text)) return;
    this.push(f, d);
  }
}

test('processors of a pipeline run in order', async (t) => {
  const p = new Pipeline([new Tagger('1'), new Tagger('2'), new Tagger('3')]);
  const { downstream } = await runProcessorTest(p, [text('a'), text('b')]);
  t.deepEqual(texts(downstream), ['a123', 'b123']);
});

test('nested pipelines behave like their flattened chain and keep order', async (t) => {
  const p = new Pipeline([new Tagger('1'), new Pipeline([new Tagger('2'), new Pipeline([new Tagger('3')])]), new Tagger('4')]);
  const sent = Array.from({ length: 50 }, (_, i) => text(String(i)));
  const { downstream } = await runProcessorTest(p, sent);
  t.deepEqual(texts(downstream), sent.map((f) => `${f.text}1234`));
});

test('an empty pipeline passes frames through', async (t) => {
  const { downstream } = await runProcessorTest(new Pipeline([]), [text('x')]);
  t.deepEqual(texts(downstream), ['x']);
});

test('upstream frames leave a pipeline at its head', async (t) => {
  const p = new Pipeline([new Tagger('1'), new Tagger('2')]);
  const { upstream } = await runProcessorTest(p, [{ upstream: text('u') }]);
  t.deepEqual(texts(upstream), ['u']);
});

test('a parallel pipeline keeps order within each branch and de-duplicates pass-through frames', async (t) => {
  const par = new ParallelPipeline([[new Tagger('A')], [new Dropper(/./)], [new SlowProcessor(30), new Tagger('C')]]);
  const sent = [text('1'), text('2'), text('3'), frame('llm-text', { text: 'shared' })];
  const { downstream } = await runProcessorTest(par, [...sent, { sleepMs: 200 }]);
  const out = texts(downstream);
  t.deepEqual(out.filter((s) => s.endsWith('A')), ['1A', '2A', '3A']);
  t.deepEqual(out.filter((s) => s.endsWith('C')), ['1C', '2C', '3C']);
  t.is(out.length, 6);
  // The llm-text frame went through all three branches unchanged and leaves exactly once.
  t.is(downstream.filter((f) => f.type === 'llm-text').length, 1);
});

test('a parallel pipeline lets the end frame out only after every branch has drained', async (t) => {
  const par = new ParallelPipeline([[new Tagger('fast')], [new SlowProcessor(500), new Tagger('slow')]]);
  const { downstream, outcome } = await runProcessorTest(par, [text('x')], { ignore: ['start', 'heartbeat', 'metrics'] });
  t.is(outcome?.how, 'ended');
  const types = frameTypes(downstream);
  t.is(types.filter((x) => x === 'end').length, 1);
  t.is(types[types.length - 1], 'end');
  t.deepEqual(texts(downstream).sort(), ['xfast', 'xslow']);
});

test('a parallel pipeline forwards a single start frame', async (t) => {
  const par = new ParallelPipeline([[new Tagger('a')], [new Tagger('b')], [new Tagger('c')]]);
  const { downstream } = await runProcessorTest(par, [], { ignore: ['heartbeat', 'metrics'] });
  t.deepEqual(frameTypes(downstream), ['start', 'end']);
});

test('a cancel goes through a parallel pipeline once', async (t) => {
  const par = new ParallelPipeline([[new SlowProcessor(100)], [new SlowProcessor(100)]]);
  const { downstream, outcome } = await runProcessorTest(par, [text('q'), frame('cancel', {})], { sendEnd: false });
  t.is(outcome?.how, 'cancelled');
  t.deepEqual(frameTypes(downstream), ['cancel']);
});

test('observers see every push with source, destination, direction and time', async (t) => {
  const clock = new VirtualClock(1000);
  const observer = new RecordingObserver();
  const a = new Tagger('a');
  const b = new Tagger('b');
  const worker = new PipelineWorker(new Pipeline([a, b]), { clock, observers: [observer], heartbeatMs: null, idleTimeoutMs: null });
  const done = worker.run();
  worker.queueFrame(text('x'));
  void worker.end();
  await clock.advanceUntil(() => worker.finished, 1000);
  await done;
  const hop = observer.events.find((e) => e.frame.type === 'text' && e.source === a.name);
  t.truthy(hop);
  t.is(hop!.destination, b.name);
  t.is(hop!.direction, 'downstream');
  t.is(hop!.timestampMs, 1000);
  t.true(observer.events.some((e) => e.frame.type === 'end'));
});
