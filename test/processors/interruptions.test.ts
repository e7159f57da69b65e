/**
 * Interruptions have one owner: the start frame's `allowInterruptions` (set on the worker or
 * runner). Every processor that acts on it reads it from there.
 */
import test from 'ava';
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { frame, signal, type Frame } from '../../core/frames.ts';
import { frameTypes, runProcessorTest } from '../../core/testing/index.ts';
import { UserTurnAggregator } from '../../processors/aggregators/user-aggregator.ts';
import { LLMContext } from '../../processors/llm/context.ts';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The user finishes a turn while the bot is speaking, then the bot stops. */
const turnOverTheBot = [
  signal('bot-started-speaking'),
  signal('user-started-speaking'),
  frame('transcription', { text: 'wait a moment', final: true }),
  signal('user-stopped-speaking'),
  { sleepMs: 1000 },
  signal('bot-stopped-speaking'),
] as const;

const committed = (frames: readonly Frame[]) => frames.filter((f) => f.type === 'llm-messages').length;

test('user turns: with interruptions allowed by the start frame, a turn finished over the bot is answered at once', async (t) => {
  const context = new LLMContext();
  const { downstream } = await runProcessorTest(new UserTurnAggregator(context), [...turnOverTheBot.slice(0, 4), { sleepMs: 1000 }], { allowInterruptions: true });
  t.is(committed(downstream), 1);
  t.deepEqual(context.messages().map((m) => m.content), ['wait a moment']);
});

test('user turns: with interruptions off in the start frame, the turn is held until the bot stops, not lost', async (t) => {
  const context = new LLMContext();
  const held = await runProcessorTest(new UserTurnAggregator(context), [...turnOverTheBot.slice(0, 4), { sleepMs: 1000 }], { allowInterruptions: false });
  t.is(committed(held.downstream), 0, 'held while the bot speaks');
  const context2 = new LLMContext();
  const released = await runProcessorTest(new UserTurnAggregator(context2), [...turnOverTheBot], { allowInterruptions: false });
  t.is(committed(released.downstream), 1);
  t.true(frameTypes(released.downstream).indexOf('bot-stopped-speaking') < frameTypes(released.downstream).indexOf('llm-messages'), 'answered after the bot stopped');
  t.deepEqual(context2.messages().map((m) => m.content), ['wait a moment']);
});

test('no other name for the setting: no source declares or reads `allowInterruption`', (t) => {
  const offenders: string[] = [];
  const walk = (dir: string): void => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, e.name);
      if (e.isDirectory()) walk(path);
      else if (/\.(ts|mts)$/.test(e.name) && /\ballowInterruption\b/.test(readFileSync(path, 'utf8'))) offenders.push(path.slice(ROOT.length + 1));
    }
  };
  for (const layer of ['core', 'processors', 'transports', 'plugins', 'agent', 'server']) walk(join(ROOT, layer));
  t.deepEqual(offenders, []);
});
