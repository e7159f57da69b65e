/**
 * Pipeline benchmark: raw framework overhead.
 *
 * - throughput_fps: 20,000 data frames (20 ms of 16 kHz audio each) through 10 pass-through
 *   processors into a counting sink, end to end (queue all, then an end frame; stop when the
 *   end frame reaches the sink).
 * - hop_p50_us / hop_p99_us: one frame at a time through the same 10-processor pipeline,
 *   source to sink (2,000 samples); per_processor_* divides that by 10.
 * - interrupt_ms: a slow processor holds 500 queued data frames; time from an interruption at
 *   the source until the sink sees it, and whether every queued frame was dropped.
 * Each figure is the median of several runs; the spread across runs is printed as noise.
 */
import { FrameProcessor, Pipeline, PipelineWorker, RealClock, frame, signal, type Direction, type Frame } from '../core/index.ts';
import { median, percentile, printJson, printTable } from './table.ts';

const PROCESSORS = 10;
const FRAMES = 20_000;
const HOP_SAMPLES = 2_000;
const QUEUED = 500;
const RUNS = 5;

class CountingSink extends FrameProcessor {
  count = 0;
  onFrame: ((f: Frame) => void) | undefined;
  protected override process(f: Frame, d: Direction): void {
    if (f.type === 'output-audio') this.count++;
    this.onFrame?.(f);
    this.push(f, d);
  }
}

class Pass extends FrameProcessor {}

/** Holds each audio frame for a long time: frames behind it pile up in its queue. */
class Stall extends FrameProcessor {
  protected override async process(f: Frame, d: Direction, signal: AbortSignal): Promise<void> {
    if (f.type === 'output-audio') await this.clock.sleep(60_000, signal);
    this.push(f, d);
  }
}

const audio = () => frame('output-audio', { pcm: new Int16Array(320), sampleRate: 16_000, channels: 1 });

function build(extra: FrameProcessor[] = []) {
  const sink = new CountingSink({ name: 'sink' });
  const procs: FrameProcessor[] = [...extra, ...Array.from({ length: PROCESSORS - extra.length }, () => new Pass())];
  const worker = new PipelineWorker(new Pipeline([...procs, sink]), { clock: new RealClock(), heartbeatMs: null, idleTimeoutMs: null });
  return { sink, worker, procs };
}

async function throughput(): Promise<number> {
  const { sink, worker } = build();
  const done = worker.run();
  const frames = Array.from({ length: FRAMES }, audio);
  const t0 = process.hrtime.bigint();
  worker.queueFrames(frames);
  void worker.end();
  await done;
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  if (sink.count !== FRAMES) throw new Error(`sink counted ${sink.count} of ${FRAMES}`);
  return FRAMES / seconds;
}

async function hops(): Promise<number[]> {
  const { sink, worker } = build();
  void worker.run();
  let arrived = 0n;
  sink.onFrame = (f) => {
    if (f.type === 'output-audio') arrived = process.hrtime.bigint();
  };
  const samples: number[] = [];
  for (let i = 0; i < HOP_SAMPLES + 200; i++) {
    const f = audio();
    const t0 = process.hrtime.bigint();
    worker.queueFrame(f);
    if (i >= 200) samples.push(Number(arrived - t0) / 1000); // first 200: warm-up
    if (i % 100 === 0) await new Promise((r) => setImmediate(r));
  }
  await worker.cancel();
  return samples;
}

async function interruption(): Promise<{ ms: number; dropped: boolean }> {
  const stall = new Stall({ name: 'stall' });
  const { sink, worker } = build([new Pass(), stall]);
  void worker.run();
  await new Promise((r) => setImmediate(r));
  for (let i = 0; i < QUEUED + 1; i++) worker.queueFrame(audio()); // one in flight, 500 queued
  await new Promise((r) => setImmediate(r));
  if ((stall.queuedFrames as number) !== QUEUED) throw new Error(`expected ${QUEUED} queued, found ${stall.queuedFrames}`);
  let seen = 0n;
  sink.onFrame = (f) => {
    if (f.type === 'interruption') seen = process.hrtime.bigint();
  };
  const t0 = process.hrtime.bigint();
  worker.queueFrame(signal('interruption'));
  const ms = Number(seen - t0) / 1e6;
  await new Promise((r) => setTimeout(r, 5));
  const dropped = stall.queuedFrames === 0 && sink.count === 0;
  await worker.cancel();
  return { ms, dropped };
}

export async function run(): Promise<void> {
  // Warm-up so the JIT has compiled the hot paths before anything is timed.
  await throughput();
  await hops();
  for (let i = 0; i < 5; i++) await interruption();
  const fps: number[] = [];
  const hopP50: number[] = [];
  const hopP99: number[] = [];
  const interrupts: number[] = [];
  let allDropped = true;
  for (let r = 0; r < RUNS; r++) {
    fps.push(await throughput());
    const h = await hops();
    hopP50.push(percentile(h, 50));
    hopP99.push(percentile(h, 99));
    const i = await interruption();
    interrupts.push(i.ms);
    allDropped &&= i.dropped;
  }
  const spread = (v: number[]) => `${Math.min(...v).toFixed(2)}..${Math.max(...v).toFixed(2)}`;
  printTable([
    { figure: 'throughput_fps', median: median(fps), runs: spread(fps.map((x) => Math.round(x))), pipecat: 4_500, goal: '>= 90,000' },
    { figure: 'hop_p50_us (10 processors)', median: median(hopP50), runs: spread(hopP50), pipecat: 260, goal: '< 10' },
    { figure: 'hop_p99_us (10 processors)', median: median(hopP99), runs: spread(hopP99), pipecat: 530, goal: '' },
    { figure: 'interrupt_ms (500 queued)', median: median(interrupts), runs: spread(interrupts), pipecat: 1.7, goal: '< 0.5' },
  ]);
  printJson('pipeline', {
    throughput_fps: Math.round(median(fps)),
    hop_p50_us: +median(hopP50).toFixed(2),
    hop_p99_us: +median(hopP99).toFixed(2),
    per_processor_p50_us: +(median(hopP50) / PROCESSORS).toFixed(3),
    interrupt_ms: +median(interrupts).toFixed(3),
    interrupt_dropped_all_queued: allDropped,
    processors: PROCESSORS,
    frames: FRAMES,
    runs: RUNS,
    node: process.version,
  });
}
