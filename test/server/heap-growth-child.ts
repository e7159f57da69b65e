/**
 * Applies the heap growth from its environment as the entry points do (server/main.ts,
 * server/runner.ts, the bot host) and prints the outcome as one JSON line, for
 * test/server/heap-growth.test.ts. (Its effect on a runner, full collections and CPU per
 * session, is measured by `npm run bench -- fleet`, with FLEET_BENCH_HEAP_GROWTH=v8 for V8's own.)
 */
import { heapGrowthFromEnv } from '../../server/config/env.ts';
import { applyHeapGrowth } from '../../server/operations/heap-growth.ts';

process.stdout.write(`${JSON.stringify(applyHeapGrowth(heapGrowthFromEnv()))}\n`);
