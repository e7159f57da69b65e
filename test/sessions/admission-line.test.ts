/**
 * The admission line (server/sessions/admission-line.ts): connects for one agent are decided in
 * batches, one batch at a time per agent; a burst is few decisions (the connects that arrived in one
 * turn of the event loop together, then all who arrived meanwhile); every connect is decided by a reading that began after it arrived; agents
 * do not wait for each other; a failed decision fails its batch only.
 */
import test from 'ava';
import { AdmissionLine } from '../../server/sessions/admission-line.ts';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

test('a burst is decided in batches, one at a time, in arrival order: those that arrived together, then those that arrived meanwhile', async (t) => {
  let slots = 3;
  let running = 0;
  let maxRunning = 0;
  const batches: number[][] = [];
  const line = new AdmissionLine<number, string>(async (_agent, requests) => {
    batches.push([...requests]);
    running++;
    maxRunning = Math.max(maxRunning, running);
    await sleep(5);
    running--;
    return requests.map(() => (slots > 0 ? (slots--, 'admitted') : 'refused'));
  });
  // Six arrive in one turn of the event loop; four more while their decision runs.
  const together = Array.from({ length: 6 }, (_, i) => line.admit('agent', i));
  await new Promise((resolve) => setImmediate(resolve));
  const meanwhile = Array.from({ length: 4 }, (_, i) => line.admit('agent', 6 + i));
  const burst = await Promise.all([...together, ...meanwhile]);
  t.deepEqual(batches, [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9]], 'the connects of one turn together (not the first alone), then everyone who arrived meanwhile');
  t.deepEqual(burst, ['admitted', 'admitted', 'admitted', ...Array(7).fill('refused')], 'admitted in arrival order');
  t.is(maxRunning, 1, 'one decision at a time per agent');
  t.is(line.busyAgents, 0, 'nothing left in line');
  // A slot frees (another process released one): the next connect is read afresh.
  slots = 1;
  t.is(await line.admit('agent', 10), 'admitted');
  t.is(await line.admit('agent', 11), 'refused');
});

test('a connect arriving during a decision is decided by the next reading, not the running one', async (t) => {
  let free = false;
  const line = new AdmissionLine<string, string>(async (_agent, requests) => {
    const reading = free;
    await sleep(10);
    return requests.map((r) => `${r}:${reading ? 'admitted' : 'refused'}`);
  });
  const first = line.admit('agent', 'first');
  await sleep(2);
  free = true; // a slot freed after the first reading began
  const second = line.admit('agent', 'second');
  t.is(await first, 'first:refused');
  t.is(await second, 'second:admitted', 'it sees the freed slot');
});

test('agents do not wait for each other; a failed decision fails its own batch only', async (t) => {
  const order: string[] = [];
  const line = new AdmissionLine<string, string>(async (agent, requests) => {
    order.push(`start ${agent}`);
    await sleep(agent === 'slow' ? 30 : 1);
    order.push(`end ${agent}`);
    if (requests.includes('boom')) throw new Error('database gone');
    return requests.map((r) => `${agent}:${r}`);
  });
  const slow = line.admit('slow', 'a');
  const fast = line.admit('fast', 'b');
  t.is(await fast, 'fast:b');
  t.is(await slow, 'slow:a');
  t.deepEqual(order.slice(0, 2), ['start slow', 'start fast']);
  await t.throwsAsync(line.admit('x', 'boom'), { message: 'database gone' });
  t.is(await line.admit('x', 'ok'), 'x:ok', 'the line goes on after a failure');
});
