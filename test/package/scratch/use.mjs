// Plain JavaScript, no tsx: the installed package's compiled entry points.
import { FrameProcessor, Pipeline, PipelineWorker, VirtualClock, frame } from 'svc-avatar/core';

class Shout extends FrameProcessor {
  process(f, direction) {
    this.push(f.type === 'text' ? frame('text', { text: f.text.toUpperCase() }) : f, direction);
  }
}
class Collect extends FrameProcessor {
  texts = [];
  process(f, direction) {
    if (f.type === 'text') this.texts.push(f.text);
    this.push(f, direction);
  }
}

const collect = new Collect();
const clock = new VirtualClock();
const worker = new PipelineWorker(new Pipeline([new Shout(), collect]), { clock, heartbeatMs: null, idleTimeoutMs: null });
let outcome;
const running = worker.run().then((o) => (outcome = o));
await clock.advance(0);
worker.queueFrame(frame('text', { text: 'hello' }));
worker.queueFrame(frame('text', { text: 'from a package' }));
void worker.end();
await clock.advanceUntil(() => outcome !== undefined, 10_000);
await running;
console.log(JSON.stringify({ texts: collect.texts, outcome }));
