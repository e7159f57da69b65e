import test from 'ava';
import {
  FrameProcessor,
  Pipeline,
  PipelineWorker,
  RealClock,
  VirtualClock,
  frame,
  signal,
  type Direction,
  type Frame,
  type WorkerEvent,
} from '../../core/index.ts';
import { SlowProcessor, text } from './helpers.ts';

function collect(worker: PipelineWorker): WorkerEvent[] {
  const events: WorkerEvent[] = [];
  worker.events$.subscribe((e) => events.push(e));
  return events;
}

function allSubjectsClosed(processors: FrameProcessor[]): boolean {
  return processors.every((p) => !p.downstream$.observed && !p.upstream$.observed);
}

test('the start frame carries the audio sample rates and interruption setting', async (t) => {
  let seen: Frame | undefined;
  class Probe extends FrameProcessor {
    protected override process(f: Frame, d: Direction): void {
      if (f.type === 'start') seen = f;
      this.push(f, d);
    }
  }
  const clock = new VirtualClock();
  const worker = new PipelineWorker(new Probe(), { clock, audioInSampleRate: 8000, audioOutSampleRate: 48000, allowInterruptions: false });
  void worker.run();
  await clock.advance(0);
  t.like(seen, { type: 'start', audioInSampleRate: 8000, audioOutSampleRate: 48000, allowInterruptions: false });
  await worker.cancel();
});

test('no timers or subscriptions remain after a worker ends (virtual clock)', async (t) => {
  const clock = new VirtualClock();
  const procs = [new SlowProcessor(20), new SlowProcessor(20)];
  const worker = new PipelineWorker(new Pipeline(procs), { clock, heartbeatMs: 100, idleTimeoutMs: 10_000 });
  const done = worker.run();
  t.true(clock.pendingTimers() >= 2, 'heartbeat and idle timers run while the worker runs');
  worker.queueFrames([text('a'), text('b')]);
  void worker.end();
  await clock.advanceUntil(() => worker.finished, 5000);
  t.is((await done).how, 'ended');
  t.is(clock.pendingTimers(), 0);
  t.true(allSubjectsClosed(procs));
  t.false(worker.events$.observed);
});

test('no timers or subscriptions remain after a worker is cancelled (real clock, active handles)', async (t) => {
  const timeoutsBefore = process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
  const clock = new RealClock();
  const procs = [new SlowProcessor(10_000)];
  const worker = new PipelineWorker(new Pipeline(procs), { clock, heartbeatMs: 5, idleTimeoutMs: 60_000 });
  const done = worker.run();
  worker.queueFrame(text('stuck'));
  await new Promise((r) => setTimeout(r, 30));
  await worker.cancel('test');
  t.is((await done).how, 'cancelled');
  t.is(clock.pendingTimers(), 0);
  t.deepEqual(procs[0]!.aborted, ['stuck']);
  t.true(allSubjectsClosed(procs));
  await new Promise((r) => setImmediate(r));
  const timeoutsAfter = process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
  t.true(timeoutsAfter <= timeoutsBefore, `timeouts before ${timeoutsBefore}, after ${timeoutsAfter}`);
});

test('heartbeats cross the pipeline and report their latency', async (t) => {
  const clock = new VirtualClock();
  const worker = new PipelineWorker(new Pipeline([new SlowProcessor(5)]), { clock, heartbeatMs: 1000, idleTimeoutMs: null });
  const events = collect(worker);
  void worker.run();
  await clock.advance(3500);
  const beats = events.filter((e) => e.type === 'heartbeat');
  t.is(beats.length, 3);
  t.true(beats.every((e) => e.type === 'heartbeat' && e.latencyMs === 0 && !e.slow));
  await worker.cancel();
});

test('the idle timeout cancels a worker with no activity, and activity postpones it', async (t) => {
  const clock = new VirtualClock();
  const worker = new PipelineWorker(new Pipeline([]), { clock, heartbeatMs: null, idleTimeoutMs: 1000 });
  const events = collect(worker);
  const done = worker.run();
  await clock.advance(900);
  worker.queueFrame(signal('user-started-speaking'));
  await clock.advance(900);
  t.false(worker.finished, 'activity at 900 ms moved the deadline');
  await clock.advance(200);
  t.true(worker.finished);
  t.deepEqual(await done, { how: 'cancelled', reason: 'idle timeout' });
  t.true(events.some((e) => e.type === 'idle-timeout'));
});

test('a fatal error frame cancels the worker; a non-fatal one is only reported', async (t) => {
  class Failing extends FrameProcessor {
    protected override process(f: Frame, d: Direction): void {
      if (f.type === 'text') this.pushError(`bad ${f.text}`, { fatal: f.text === 'fatal' });
      else this.push(f, d);
    }
  }
  const clock = new VirtualClock();
  const worker = new PipelineWorker(new Failing(), { clock, heartbeatMs: null, idleTimeoutMs: null });
  const events = collect(worker);
  const done = worker.run();
  worker.queueFrame(text('minor'));
  await clock.advance(10);
  t.false(worker.finished);
  worker.queueFrame(text('fatal'));
  await clock.advance(10);
  const outcome = await done;
  t.is(outcome.how, 'cancelled');
  t.deepEqual(
    events.flatMap((e) => (e.type === 'error' ? [e.frame.message] : [])),
    ['bad minor', 'bad fatal'],
  );
});

test('an interruption request from a processor interrupts the whole pipeline', async (t) => {
  class BargeIn extends FrameProcessor {
    protected override process(f: Frame, d: Direction): void {
      if (f.type === 'user-started-speaking') this.push(frame('interruption-request', {}), 'upstream');
      this.push(f, d);
    }
  }
  const slow = new SlowProcessor(1000);
  const clock = new VirtualClock();
  const worker = new PipelineWorker(new Pipeline([slow, new BargeIn()]), { clock, heartbeatMs: null, idleTimeoutMs: null });
  void worker.run();
  worker.queueFrames([text('long answer'), text('more')]);
  await clock.advance(10);
  // The VAD sits below the slow processor; its request travels up to the worker.
  worker.queueFrame(signal('user-started-speaking'));
  await clock.advance(10);
  t.deepEqual(slow.aborted, ['long answer']);
  t.is(slow.queuedFrames, 0);
  await worker.cancel();
});

test('an interruption request is ignored when interruptions are not allowed', async (t) => {
  class Requester extends FrameProcessor {
    protected override process(f: Frame, d: Direction): void {
      if (f.type === 'user-started-speaking') this.push(frame('interruption-request', {}), 'upstream');
      this.push(f, d);
    }
  }
  const slow = new SlowProcessor(100);
  const clock = new VirtualClock();
  const worker = new PipelineWorker(new Pipeline([slow, new Requester()]), {
    clock,
    heartbeatMs: null,
    idleTimeoutMs: null,
    allowInterruptions: false,
  });
  void worker.run();
  worker.queueFrame(text('keep'));
  await clock.advance(10);
  worker.queueFrame(signal('user-started-speaking'));
  await clock.advance(200);
  t.deepEqual(slow.aborted, []);
  await worker.cancel();
});

test('an end frame pushed upstream by a processor ends the worker gracefully', async (t) => {
  class Hangup extends FrameProcessor {
    protected override process(f: Frame, d: Direction): void {
      if (f.type === 'text' && f.text === 'bye') this.push(frame('end', { reason: 'end_call' }), 'upstream');
      this.push(f, d);
    }
  }
  const clock = new VirtualClock();
  const worker = new PipelineWorker(new Hangup(), { clock, heartbeatMs: null, idleTimeoutMs: null });
  const done = worker.run();
  worker.queueFrame(text('bye'));
  await clock.advance(10);
  t.deepEqual(await done, { how: 'ended', reason: 'end_call' });
});

test('frames queued after the worker finished are ignored', async (t) => {
  const clock = new VirtualClock();
  const worker = new PipelineWorker(new Pipeline([]), { clock, heartbeatMs: null, idleTimeoutMs: null });
  void worker.run();
  await worker.cancel();
  t.notThrows(() => worker.queueFrame(text('late')));
  t.true(worker.finished);
});
