import test from 'ava';
import { FrameProcessor, ProcessorMetrics, frame, type Direction, type Frame } from '../../core/index.ts';
import { expectFrameTypes, runProcessorTest } from '../../core/testing/index.ts';

class TimedService extends FrameProcessor {
  private readonly metrics = ProcessorMetrics.for(this.name, () => this.clock, (f) => this.push(f), () => this.startFrame?.enableMetrics ?? false, 'model-x');
  protected override async process(f: Frame, d: Direction, signal: AbortSignal): Promise<void> {
    if (f.type !== 'text') return this.push(f, d);
    this.metrics.startTtfb();
    this.metrics.startProcessing();
    await this.clock.sleep(120, signal);
    this.metrics.stopTtfb();
    this.push(frame('llm-text', { text: f.text.toUpperCase() }));
    await this.clock.sleep(30, signal);
    this.metrics.stopProcessing();
    this.metrics.usage({ tokens: f.text.length });
  }
}

test('services report TTFB, processing time and usage as metrics frames', async (t) => {
  const service = new TimedService({ name: 'svc' });
  const { downstream, events } = await runProcessorTest(service, [frame('text', { text: 'hello' }), { sleepMs: 200 }], { ignore: ['start', 'end'] });
  const metrics = downstream.flatMap((f) => (f.type === 'metrics' ? f.data : []));
  t.deepEqual(metrics, [
    { kind: 'ttfb', processor: 'svc', valueMs: 120, model: 'model-x' },
    { kind: 'processing', processor: 'svc', valueMs: 150, model: 'model-x' },
    { kind: 'usage', processor: 'svc', counters: { tokens: 5 }, model: 'model-x' },
  ]);
  t.is(events.filter((e) => e.type === 'metrics').length, 3, 'the worker reports them as events too');
});

test('metrics are silent when the start frame disables them', async (t) => {
  const { downstream } = await runProcessorTest(new TimedService(), [frame('text', { text: 'x' }), { sleepMs: 200 }], {
    enableMetrics: false,
    ignore: ['start', 'end'],
  });
  t.false(downstream.some((f) => f.type === 'metrics'));
});

test('expectFrameTypes explains a mismatch with the frames it saw', (t) => {
  const frames = [frame('text', { text: 'a' })];
  t.notThrows(() => expectFrameTypes(frames, ['text']));
  const err = t.throws(() => expectFrameTypes(frames, ['llm-text'], 'down'));
  t.regex(err!.message, /down: expected \[llm-text\]\n  but got \[text\]/);
  t.regex(err!.message, /text#\d+\("a"\)/);
});
