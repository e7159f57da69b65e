import test from 'ava';
import { Registry, RegistryError, type Plugin } from '../../core/registry.ts';

test('factories are created by kind and slug with their options', (t) => {
  const registry = new Registry();
  registry.register('tts', 'echo', (o: { voice: string }) => ({ speak: (s: string) => `${o.voice}:${s}` }), { label: 'Echo' });
  const tts = registry.create<{ speak(s: string): string }>('tts', 'echo', { voice: 'v1' });
  t.is(tts.speak('hi'), 'v1:hi');
  t.deepEqual(registry.list('tts'), [{ slug: 'echo', label: 'Echo' }]);
});

test('an unknown slug fails with a clear error naming the known ones', (t) => {
  const registry = new Registry();
  registry.register('tts', 'local', () => ({}));
  registry.register('tts', 'elevenlabs', () => ({}));
  const err = t.throws(() => registry.create('tts', 'nope'), { instanceOf: RegistryError });
  t.is(err?.code, 'unknown_plugin');
  t.is(err?.message, 'no tts plugin named "nope"; known tts plugins: elevenlabs, local');
  const none = t.throws(() => registry.create('rooms', 'x'), { instanceOf: RegistryError });
  t.regex(none!.message, /\(none registered\)/);
});

test('a plugin registers through register(registry) once', (t) => {
  let calls = 0;
  const plugin: Plugin = {
    name: 'demo',
    register(r) {
      calls++;
      r.register('face', 'demo', () => 'face');
    },
  };
  const registry = new Registry();
  registry.use(plugin).use(plugin);
  t.is(calls, 1);
  t.true(registry.has('face', 'demo'));
  t.is(registry.create<string>('face', 'demo'), 'face');
});

test('registering the same key twice is refused unless replacing', (t) => {
  const registry = new Registry();
  registry.register('stt', 'x', () => 1);
  t.throws(() => registry.register('stt', 'x', () => 2), { instanceOf: RegistryError });
  registry.register('stt', 'x', () => 3, {}, true);
  t.is(registry.create<number>('stt', 'x'), 3);
});

test('registries are isolated from each other', (t) => {
  const a = new Registry();
  const b = new Registry();
  a.register('llm', 'only-a', () => 'a');
  t.false(b.has('llm', 'only-a'));
});

test('warmUp runs each used plugin\'s warm-up once, in order; a failing one is reported and the others still run', async (t) => {
  const registry = new Registry();
  const ran: string[] = [];
  const plugin = (name: string, warmUp?: () => Promise<void>): Plugin => ({ name, register: () => undefined, ...(warmUp ? { warmUp } : {}) });
  registry.use(plugin('a', async () => void ran.push('a')));
  registry.use(plugin('none'));
  registry.use(plugin('broken', async () => { throw new Error('no engine here'); }));
  registry.use(plugin('c', async () => void ran.push('c')));
  registry.use(plugin('a', async () => void ran.push('a again'))); // same name: not used twice
  const errors: Array<[string, string]> = [];
  await registry.warmUp((name, err) => errors.push([name, (err as Error).message]));
  t.deepEqual(ran, ['a', 'c']);
  t.deepEqual(errors, [['broken', 'no engine here']]);
  await t.notThrowsAsync(registry.warmUp(), 'without onError a failure is still swallowed');
});
