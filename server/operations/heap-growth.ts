/**
 * How far V8 lets the old generation grow past what survived the last full collection, in the
 * processes that run live sessions (`npm start`, `npm run runner`, the bot host).
 *
 * Why: with V8's own heuristic a runner with three live 640x360 sessions (a live heap of about
 * 52 MB) ran a full mark-compact every 300-400 ms, each freeing 1-3 MB. V8 picks the growing
 * factor from the main thread's pauses, which stay small because the marking runs concurrently
 * on its helper threads, so it saw no reason to grow; but those threads spent about 100 ms of CPU
 * per collection (`--trace-gc-nvp`: background.mark 98-117 ms), about 0.1 core on two cores for
 * nothing. With the old generation allowed to reach twice its live size, the same runner made no
 * full collection in a 10 s window and its CPU per live session fell from 0.159-0.167 to 0.125-0.135
 * core (bench `fleet`, alternating runs; docs/deployment.md "Garbage collection"). The price is memory: up to twice the live heap
 * (about 50 MB more for that runner) before a collection.
 *
 * `SVC_HEAP_GROWING_PERCENT` (1-400, default 100: twice the live size; read by
 * server/config/env.ts's `heapGrowthFromEnv`) sets it; `v8` leaves V8's
 * own heuristic. A process started with its own `--heap-growing-percent` (on the command line or
 * in NODE_OPTIONS) keeps it: the operator's choice wins.
 */
import v8 from 'node:v8';

export const HEAP_GROWTH_DEFAULTS = {
  /** The old generation may grow to (1 + percent / 100) times its live size before a full collection. */
  percent: 100,
  /** The bounds SVC_HEAP_GROWING_PERCENT accepts. */
  minPercent: 1,
  maxPercent: 400,
} as const;

/** What the environment asks for (server/config/env.ts, `heapGrowthFromEnv`). */
export interface HeapGrowthSetting {
  /** A percent, or `null` for V8's own heuristic. */
  readonly percent: number | null;
  /** NODE_OPTIONS, where an operator's own flag may be. */
  readonly nodeOptions: string;
}

const FLAG = '--heap-growing-percent';

export type HeapGrowthOutcome =
  | { readonly applied: true; readonly percent: number }
  | { readonly applied: false; readonly reason: 'v8' | 'operator' };

/**
 * Sets the growth for this process (V8 reads it after every full collection, so setting it at
 * start-up is enough), unless V8's own is asked for or the operator gave the flag on the command
 * line (`execArgv`) or in NODE_OPTIONS.
 */
export function applyHeapGrowth(setting: HeapGrowthSetting, execArgv: readonly string[] = process.execArgv): HeapGrowthOutcome {
  if (setting.percent === null) return { applied: false, reason: 'v8' };
  const named = (arg: string) => arg === FLAG || arg.startsWith(`${FLAG}=`) || arg === '--heap_growing_percent' || arg.startsWith('--heap_growing_percent=');
  if (execArgv.some(named) || setting.nodeOptions.split(/\s+/).some(named)) return { applied: false, reason: 'operator' };
  v8.setFlagsFromString(`${FLAG}=${setting.percent}`);
  return { applied: true, percent: setting.percent };
}
