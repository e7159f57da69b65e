/**
 * The worker-thread host of the offline engines (plugins/local/engine-worker.ts), with a stand-in
 * worker that speaks the same lifecycle (fixtures/engine-worker-fixture.mjs): a worker that
 * cannot load, one that dies while it holds requests, and a close, each fail what was held with
 * `engine_failure` and leave the host able to start a fresh worker.
 */
import test from 'ava';
import { EngineWorker } from '../../plugins/local/engine-worker.ts';
import { LocalEngineError } from '../../plugins/local/local-engine-error.ts';

type Echoed = { readonly type: 'echoed'; readonly id: number; readonly text: string };

/** A host over the fixture, with the requests it holds by id and the errors it stopped with. */
function host(load: () => 'ok' | 'fail') {
  const held = new Map<number, (reply: Echoed | Error) => void>();
  const stops: LocalEngineError[] = [];
  let starts = 0;
  const worker: EngineWorker<Echoed> = new EngineWorker<Echoed>({
    name: 'fixture',
    url: new URL('./fixtures/engine-worker-fixture.mjs', import.meta.url),
    workerData: () => ({ load: (starts++, load()) }),
    onReply: (reply) => {
      const answer = held.get(reply.id);
      held.delete(reply.id);
      worker.letGo();
      answer?.(reply);
    },
    onStop: (error) => {
      stops.push(error);
      for (const answer of held.values()) answer(error);
      held.clear();
    },
    busy: () => held.size > 0,
  });
  let nextId = 1;
  const ask = (message: Record<string, unknown>) => {
    const id = nextId++;
    const answer = new Promise<Echoed | Error>((resolve) => held.set(id, resolve));
    return { sent: worker.post({ ...message, id }), answer };
  };
  return { worker, ask, stops, starts: () => starts };
}

test('a worker whose data does not load fails its start with the reason, and the next start tries again', async (t) => {
  let load: 'ok' | 'fail' = 'fail';
  const h = host(() => load);
  const err = await t.throwsAsync(h.worker.start());
  t.true(err instanceof LocalEngineError);
  t.is((err as LocalEngineError).code, 'engine_failure');
  t.is(err!.message, 'fixture worker stopped: its data did not load: no such model file');
  t.is(h.stops.length, 1);
  load = 'ok';
  const { sent, answer } = h.ask({ type: 'echo', text: 'again' });
  await sent;
  t.deepEqual(await answer, { type: 'echoed', id: 1, text: 'again' });
  t.is(h.starts(), 2, 'a second worker was started');
  await h.worker.close();
});

test('a worker that dies fails every request it held, and the next request starts a fresh one', async (t) => {
  const h = host(() => 'ok');
  await h.worker.start();
  const first = h.ask({ type: 'echo', text: 'one' });
  t.deepEqual(await first.answer, { type: 'echoed', id: 1, text: 'one' });
  // Two requests the worker never answers: it exits on the second.
  const lost = h.ask({ type: 'noop' });
  const dying = h.ask({ type: 'die' });
  await Promise.all([lost.sent, dying.sent]);
  const [a, b] = await Promise.all([lost.answer, dying.answer]);
  for (const reply of [a, b]) {
    t.true(reply instanceof LocalEngineError, 'a held request fails');
    t.is((reply as LocalEngineError).code, 'engine_failure');
    t.is((reply as LocalEngineError).message, 'fixture worker stopped: exit code 7');
  }
  const next = h.ask({ type: 'echo', text: 'two' });
  await next.sent;
  t.deepEqual(await next.answer, { type: 'echoed', id: 4, text: 'two' });
  t.is(h.starts(), 2);
  await h.worker.close();
});

test('close fails what the worker held, and a request after it starts the worker again', async (t) => {
  const h = host(() => 'ok');
  const pending = h.ask({ type: 'noop' });
  await pending.sent;
  await h.worker.close();
  const reply = await pending.answer;
  t.true(reply instanceof LocalEngineError);
  t.is((reply as LocalEngineError).message, 'fixture engine closed');
  const after = h.ask({ type: 'echo', text: 'back' });
  await after.sent;
  t.deepEqual(await after.answer, { type: 'echoed', id: 2, text: 'back' });
  await h.worker.close();
  t.is(h.stops.length, 2, 'each close reports a stop');
});
