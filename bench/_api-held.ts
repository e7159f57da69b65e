/**
 * The held connections' wait queue (server/db/held-connections.ts) priced alone: `preparedQuery`
 * with 50 statements always in flight on a pool of 20 (the REST bench's concurrency and pool), a
 * small keyed SELECT so that the client side's work shows; statements per second and main-thread
 * CPU µs per statement (process.cpuUsage: pg's parsing included, PostgreSQL not), variants
 * alternated round by round in one process: the queue alone (`fallbackQueueLength` Infinity), a
 * fallback to knex's pool past 16 and past 4 waiters, and, with `API_HELD_OLD_TREE=<checkout>`,
 * that checkout's preparedQuery (e.g. a `git worktree` of an older commit).
 * `npx tsx bench/_api-held.ts` (`ROUNDS=6`).
 */
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { openDatabase, type Db } from '../server/db/connect.ts';
import { HELD_CONNECTIONS } from '../server/db/held-connections.ts';
import { preparedQuery } from '../server/db/prepared-query.ts';

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const SQL = 'select ?::int as n, now() as at, repeat(?, 40) as pad';
const IN_FLIGHT = 50;

interface Variant {
  name: string;
  query: typeof preparedQuery;
  db: Db;
  fallbackQueueLength?: number;
}

async function main(): Promise<void> {
  const open = () => openDatabase({ databaseUrl: DATABASE_URL, pgliteDir: '', poolMax: 20 });
  const variants: Variant[] = [
    { name: 'queue', query: preparedQuery, db: open(), fallbackQueueLength: Infinity },
    { name: 'fallback_16', query: preparedQuery, db: open(), fallbackQueueLength: 16 },
    { name: 'fallback_4', query: preparedQuery, db: open(), fallbackQueueLength: 4 },
  ];
  const oldTree = process.env.API_HELD_OLD_TREE;
  if (oldTree) {
    const old = await import(`${oldTree}/server/db/prepared-query.ts`);
    const oldConnect = await import(`${oldTree}/server/db/connect.ts`);
    variants.unshift({ name: 'old_tree', query: old.preparedQuery, db: oldConnect.openDatabase({ databaseUrl: DATABASE_URL, pgliteDir: '', poolMax: 20 }) });
  }
  const once = async (v: Variant, ms: number) => {
    if (v.fallbackQueueLength !== undefined) (HELD_CONNECTIONS as { fallbackQueueLength: number }).fallbackQueueLength = v.fallbackQueueLength;
    let n = 0;
    let stop = false;
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    const loops = Array.from({ length: IN_FLIGHT }, async (_, i) => {
      while (!stop) {
        await v.query(v.db, 'held_bench.q', SQL, [i, 'x']);
        n++;
      }
    });
    await new Promise((resolve) => setTimeout(resolve, ms));
    stop = true;
    const cpu = process.cpuUsage(cpu0);
    const elapsed = performance.now() - t0;
    await Promise.all(loops);
    return { perSecond: Math.round((n / elapsed) * 1000), cpuUs: Math.round((cpu.user + cpu.system) / n) };
  };
  try {
    for (const v of variants) await once(v, 1_000);
    const results = new Map<string, { perSecond: number[]; cpuUs: number[] }>(variants.map((v) => [v.name, { perSecond: [], cpuUs: [] }]));
    const rounds = Number(process.env.ROUNDS ?? 6);
    for (let r = 0; r < rounds; r++) {
      for (const v of r % 2 ? [...variants].reverse() : variants) {
        const x = await once(v, 2_000);
        results.get(v.name)!.perSecond.push(x.perSecond);
        results.get(v.name)!.cpuUs.push(x.cpuUs);
      }
    }
    const median = (a: number[]) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
    for (const [name, r] of results) {
      console.log(`${name.padEnd(12)} statements/s ${median(r.perSecond)} (${r.perSecond.join(' / ')})  cpu µs/statement ${median(r.cpuUs)} (${r.cpuUs.join(' / ')})`);
    }
    console.log(`loadavg_1m ${loadavg()[0]!.toFixed(1)}`);
  } finally {
    for (const v of variants) await v.db.destroy();
  }
}

void main();
