import test from 'ava';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { ConfigError, heapGrowthFromEnv } from '../../server/config/env.ts';
import { applyHeapGrowth, HEAP_GROWTH_DEFAULTS } from '../../server/operations/heap-growth.ts';

const run = promisify(execFile);

test('SVC_HEAP_GROWING_PERCENT: the default, v8, and whole percents within the bounds; NODE_OPTIONS kept for the check', (t) => {
  const percent = (env: Record<string, string>) => heapGrowthFromEnv(env).percent;
  t.is(percent({}), HEAP_GROWTH_DEFAULTS.percent);
  t.is(percent({ SVC_HEAP_GROWING_PERCENT: ' ' }), HEAP_GROWTH_DEFAULTS.percent);
  t.is(percent({ SVC_HEAP_GROWING_PERCENT: 'v8' }), null);
  t.is(percent({ SVC_HEAP_GROWING_PERCENT: '1' }), 1);
  t.is(percent({ SVC_HEAP_GROWING_PERCENT: '250' }), 250);
  t.is(percent({ SVC_HEAP_GROWING_PERCENT: '400' }), 400);
  t.deepEqual(heapGrowthFromEnv({ NODE_OPTIONS: '--max-old-space-size=512' }), { percent: 100, nodeOptions: '--max-old-space-size=512' });
  for (const bad of ['0', '401', '-5', '1.5', 'fast', '100%']) {
    const err = t.throws(() => heapGrowthFromEnv({ SVC_HEAP_GROWING_PERCENT: bad }), { instanceOf: ConfigError });
    t.regex(err!.message, /^SVC_HEAP_GROWING_PERCENT must be v8 or a whole percent from 1 to 400, got "/, bad);
  }
});

test("an operator's own --heap-growing-percent wins, on the command line or in NODE_OPTIONS; v8 sets nothing", (t) => {
  t.deepEqual(applyHeapGrowth({ percent: null, nodeOptions: '' }, []), { applied: false, reason: 'v8' });
  t.deepEqual(applyHeapGrowth({ percent: 100, nodeOptions: '' }, ['--heap-growing-percent=30']), { applied: false, reason: 'operator' });
  t.deepEqual(applyHeapGrowth({ percent: 100, nodeOptions: '' }, ['--heap_growing_percent', '30']), { applied: false, reason: 'operator' });
  t.deepEqual(applyHeapGrowth({ percent: 100, nodeOptions: '--import=x.mjs  --heap-growing-percent=30' }, []), { applied: false, reason: 'operator' });
  // A flag that only starts alike is not the operator's growth.
  t.deepEqual(applyHeapGrowth({ percent: 100, nodeOptions: '' }, ['--heap-growing-percentage-x']), { applied: true, percent: 100 });
});

/** The child applies the growth from its environment as the entry points do; its outcome. */
async function child(env: Record<string, string>, nodeArgs: string[] = []): Promise<unknown> {
  const { stdout } = await run(process.execPath, [...nodeArgs, '--import', 'tsx', 'test/server/heap-growth-child.ts'], { env: { ...process.env, NODE_OPTIONS: '', ...env }, timeout: 30_000 });
  return JSON.parse(stdout.trim());
}

test('a process applies the growth from its environment at start, unless V8 is asked for or its command line has its own', async (t) => {
  const env = { SVC_HEAP_GROWING_PERCENT: '' };
  t.deepEqual(await child(env), { applied: true, percent: 100 });
  t.deepEqual(await child({ SVC_HEAP_GROWING_PERCENT: '150' }), { applied: true, percent: 150 });
  t.deepEqual(await child({ SVC_HEAP_GROWING_PERCENT: 'v8' }), { applied: false, reason: 'v8' });
  t.deepEqual(await child(env, ['--heap-growing-percent=30']), { applied: false, reason: 'operator' });
  const refused = await child({ SVC_HEAP_GROWING_PERCENT: 'lots' }).then(() => null, (err: { code?: number; stderr?: string }) => err);
  t.truthy(refused, 'a bad value stops the process');
  t.regex(refused!.stderr ?? '', /SVC_HEAP_GROWING_PERCENT must be v8 or a whole percent/);
});

test('a bad SVC_HEAP_GROWING_PERCENT stops npm start and npm run runner with one clear line', async (t) => {
  const start = async (entry: string, env: Record<string, string>) =>
    run(process.execPath, ['--import', 'tsx', entry], { env: { ...process.env, PORT: '0', SVC_HEAP_GROWING_PERCENT: 'lots', ...env }, timeout: 60_000 }).then(
      () => ({ code: 0, stderr: '' }),
      (err: { code?: number; stderr?: string }) => ({ code: err.code, stderr: err.stderr ?? '' }),
    );
  const api = await start('server/main.ts', { SVC_DATA_DIR: '/nonexistent/never-created' });
  t.is(api.code, 1);
  t.is(api.stderr.trim(), 'svc server configuration error: SVC_HEAP_GROWING_PERCENT must be v8 or a whole percent from 1 to 400, got "lots"');
  const runner = await start('server/runner.ts', { DATABASE_URL: 'postgres://nobody@127.0.0.1:1/never', SVC_RUNNER_PUBLIC_URL: 'http://127.0.0.1:9', SVC_RUNNER_SECRET: 'a-runner-secret-of-some-length' });
  t.is(runner.code, 1);
  t.is(runner.stderr.trim(), 'svc runner configuration error: SVC_HEAP_GROWING_PERCENT must be v8 or a whole percent from 1 to 400, got "lots"');
});
