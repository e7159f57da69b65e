import test from 'ava';
import { resolveOptions } from '../../core/options.ts';
import { WORKER_DEFAULTS } from '../../core/worker.ts';
import { MemoryMediaSink } from '../../transports/media-sink.ts';
import { OutputTransport } from '../../transports/output-transport.ts';
import { VAD_DEFAULTS, VADProcessor } from '../../processors/vad/vad-processor.ts';

const DEFAULTS = { startMs: 200, label: 'x', enabled: true, timeoutMs: 1000 as number | null } as const;

test('resolveOptions: the defaults when nothing is given', (t) => {
  t.deepEqual(resolveOptions(DEFAULTS), { startMs: 200, label: 'x', enabled: true, timeoutMs: 1000 });
  t.deepEqual(resolveOptions(DEFAULTS, {}), { startMs: 200, label: 'x', enabled: true, timeoutMs: 1000 });
});

test('resolveOptions: only undefined falls back; 0, false, empty and null are choices', (t) => {
  t.deepEqual(resolveOptions(DEFAULTS, { startMs: 0, label: '', enabled: false, timeoutMs: null }), { startMs: 0, label: '', enabled: false, timeoutMs: null });
  t.deepEqual(resolveOptions(DEFAULTS, { startMs: undefined, timeoutMs: 5 }), { startMs: 200, label: 'x', enabled: true, timeoutMs: 5 });
});

test('resolveOptions: keys the defaults do not declare are not copied, and the defaults object is not changed', (t) => {
  const options = { startMs: 50, name: 'MyVAD' } as { startMs: number };
  const resolved = resolveOptions(DEFAULTS, options);
  t.false('name' in resolved);
  t.is(resolved.startMs, 50);
  t.is(DEFAULTS.startMs, 200);
});

test('the worker and processors resolve through their declared defaults', (t) => {
  // No hidden fallback: a processor's settings are its DEFAULTS object with the caller's values over it.
  class Probe extends VADProcessor {
    get resolved() {
      return (this as unknown as { settings: unknown }).settings;
    }
  }
  const analyzer = { sampleRate: 16_000, windowSamples: 320, confidence: () => 0, reset: () => undefined };
  t.deepEqual(new Probe(analyzer).resolved, { ...VAD_DEFAULTS });
  t.deepEqual(new Probe(analyzer, { stopMs: 500, name: 'v' }).resolved, { ...VAD_DEFAULTS, stopMs: 500 });
  // Before a start frame says otherwise, the output plays at the worker's declared output rate.
  t.is(new OutputTransport(new MemoryMediaSink()).sampleRate, WORKER_DEFAULTS.audioOutSampleRate);
});
