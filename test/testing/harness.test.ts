/** The test kits themselves: until, and the conversation harness's steps, captures and failures. */
import test from 'ava';
import { frame, FrameProcessor, PassThroughProcessor, type Direction, type Frame } from '../../core/index.ts';
import { Conversation, ConversationExpectationError, eventually, holdsWithin, until, UntilTimeoutError } from '../../testing/index.ts';

test('until resolves with the first truthy value, and times out naming what it waited for', async (t) => {
  let n = 0;
  t.is(await until(() => (++n >= 3 ? `after ${n}` : undefined), { intervalMs: 1 }), 'after 3');
  const err = await t.throwsAsync(until(() => false, { timeoutMs: 30, what: 'the moon' }), { instanceOf: UntilTimeoutError });
  t.regex(err!.message, /timed out after 30 ms waiting for the moon/);
  t.false(await holdsWithin(() => false, { timeoutMs: 30 }));
  t.true(await holdsWithin(() => true, { timeoutMs: 30 }));
});

test('what may be a function, called once the wait times out, to say what was seen by then', async (t) => {
  let seen = 0;
  let described = 0;
  const what = () => `three events; saw ${seen} (described ${++described} time)`;
  const err = await t.throwsAsync(until(() => ++seen >= 1000, { timeoutMs: 30, intervalMs: 1, what }), { instanceOf: UntilTimeoutError });
  t.regex(err!.message, /timed out after 30 ms waiting for three events; saw \d+ \(described 1 time\)/);
  // The count at the timeout (every check made by then), not at the start (0): how many checks a
  // loaded machine fits in 30 ms varies, so the message is compared with the final count.
  t.is(Number(/saw (\d+)/.exec(err!.message)![1]), seen, 'the count at the timeout, not at the start');
  t.true(seen >= 1);
});

test('holdsWithin takes the options of until and awaits an async check (a promise is not a truthy answer)', async (t) => {
  let reads = 0;
  const slowRead = async () => {
    await new Promise((resolve) => setTimeout(resolve, 1));
    return ++reads >= 3;
  };
  t.true(await holdsWithin(slowRead, { timeoutMs: 1000, intervalMs: 1 }));
  t.is(reads, 3);
  t.false(await holdsWithin(async () => false, { timeoutMs: 30, intervalMs: 1 }));
  await t.throwsAsync(holdsWithin(() => { throw new Error('a broken check'); }), { message: 'a broken check' });
});

test('eventually takes 0 and false as values, and a check that throws as not yet', async (t) => {
  let calls = 0;
  t.is(await eventually(() => (++calls < 3 ? undefined : 0), { intervalMs: 1 }), 0);
  let attempts = 0;
  const flaky = async () => {
    if (++attempts < 3) throw new Error('still starting');
    return false;
  };
  t.is(await eventually(flaky, { intervalMs: 1 }), false);
  await t.throwsAsync(eventually(() => undefined, { timeoutMs: 30, what: 'a value' }), { instanceOf: UntilTimeoutError, message: /waiting for a value/ });
});

/** Answers each text frame with an echo after 500 ms of clock time. */
class SlowEcho extends FrameProcessor {
  protected override async process(f: Frame, direction: Direction, signal: AbortSignal): Promise<void> {
    this.push(f, direction);
    if (f.type !== 'text') return;
    await this.clock.sleep(500, signal);
    this.push(frame('llm-text', { text: `echo: ${f.text}` }));
  }
}

test('a conversation runs steps on the virtual clock and records what each processor pushed', async (t) => {
  const echo = new SlowEcho({ name: 'echo' });
  const c = await Conversation.start({ pipeline: [echo, new PassThroughProcessor()] });
  const started = performance.now();
  await c.play([
    { frame: frame('text', { text: 'hi' }) },
    { sleepMs: 400 },
  ]);
  t.deepEqual(c.framesFrom('echo', 'llm-text'), [], 'nothing before 500 ms of virtual time');
  await c.play([{ until: () => c.framesFrom('echo', 'llm-text').length > 0, withinMs: 1000, what: 'the echo' }]);
  t.like(c.framesFrom('echo', 'llm-text')[0], { text: 'echo: hi' });
  t.true(c.clock.now() >= 500);
  c.expectFramesFrom('echo', ['text', 'llm-text'], ['start']);
  t.throws(() => c.expectFramesFrom('echo', ['llm-text']), { instanceOf: ConversationExpectationError, message: /echo pushed \[start, text, llm-text\]/ });
  t.like(await c.end(), { how: 'ended' });
  t.true(performance.now() - started < 60_000, 'virtual time, not real time (a generous bound: a loaded machine is slow)');
});

test('an expectation that does not hold in time fails with what was expected and when', async (t) => {
  const c = await Conversation.start({ pipeline: [new SlowEcho()] });
  const err = await t.throwsAsync(c.play([{ until: () => false, withinMs: 200, what: 'a miracle' }]), { instanceOf: ConversationExpectationError });
  t.regex(err!.message, /expected a miracle within 200 ms of virtual time/);
  await c.cancel();
  t.is(c.outcome?.how, 'cancelled');
});

test('speech is fed as 20 ms input-audio frames, one per 20 ms of virtual time', async (t) => {
  const c = await Conversation.start({ pipeline: [new SlowEcho({ name: 'first' }), new PassThroughProcessor()] });
  await c.say(new Int16Array(16_000 / 10)); // 100 ms at 16 kHz
  const audio = c.framesFrom('first', 'input-audio');
  t.is(audio.length, 5);
  t.true(audio.every((f) => f.type === 'input-audio' && f.pcm.length === 320 && f.sampleRate === 16_000));
  t.is(c.clock.now(), 100);
  await c.cancel();
});
