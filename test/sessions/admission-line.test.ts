/**
 * The admission line (server/sessions/admission-line.ts): one decision at a time per agent; a
 * refusal at the limit is given to the connects that were waiting before it was read, and never
 * to one that arrives after (it asks again, and sees a slot freed meanwhile).
 */
import test from 'ava';
import { AdmissionLine } from '../../server/sessions/admission-line.ts';

test('one decision at a time per agent; waiters before a refusal share it, later arrivals decide again', async (t) => {
  const line = new AdmissionLine<string>();
  let slots = 2;
  let running = 0;
  let maxRunning = 0;
  let decisions = 0;
  // A burst: each connect checks for a shared refusal first, as SessionStore.admit does.
  const connect = () => {
    const at = performance.now();
    return line.run<string>('agent', async () => {
      const shared = line.refusalFor('agent', at);
      if (shared) return { answer: `shared ${shared}` };
      decisions++;
      running++;
      maxRunning = Math.max(maxRunning, running);
      await new Promise((resolve) => setTimeout(resolve, 5));
      running--;
      if (slots > 0) {
        slots--;
        return { answer: 'admitted' };
      }
      return { answer: 'refused', atLimit: 'full' };
    });
  };
  const burst = await Promise.all(Array.from({ length: 10 }, connect));
  t.deepEqual(burst.slice(0, 3), ['admitted', 'admitted', 'refused']);
  t.deepEqual(burst.slice(3), Array(7).fill('shared full'), 'the rest of the burst shares the refusal');
  t.is(maxRunning, 1, 'one decision at a time');
  t.is(decisions, 3);
  // A slot frees (another process released one): the next connect asks again and is admitted.
  slots = 1;
  t.is(await connect(), 'admitted');
  t.is(await connect(), 'refused', 'and the one after that reads full again');
});

test('a refusal is shared with a connect that was waiting before it was read, unless a slot was freed meanwhile', async (t) => {
  const sleep = () => new Promise((resolve) => setTimeout(resolve, 5));
  for (const free of [false, true]) {
    const line = new AdmissionLine<string>();
    const arrived = performance.now(); // the second connect arrives before the first decision begins
    const first = line.run<string>('agent', async () => {
      await sleep();
      return { answer: 'refused', atLimit: 'full' };
    });
    const second = line.run<string>('agent', async () => ({ answer: line.refusalFor('agent', arrived) ?? 'asked again' }));
    await first;
    if (free) line.freed('agent');
    t.is(await second, free ? 'asked again' : 'full');
  }
});
