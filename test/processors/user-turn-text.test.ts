/**
 * The words of a user turn as the model gets them: finals joined, and a final that trails off
 * (`What can you…`, the offline STT's beginning of a phrase, or a provider's `...`) loses its
 * ellipsis when more words follow it in the same turn.
 */
import test from 'ava';
import { frame, signal } from '../../core/frames.ts';
import { runProcessorTest } from '../../core/testing/index.ts';
import { UserTurnAggregator } from '../../processors/aggregators/user-aggregator.ts';
import { LLMContext } from '../../processors/llm/context.ts';

async function turnText(finals: string[]): Promise<string[]> {
  const context = new LLMContext();
  await runProcessorTest(
    new UserTurnAggregator(context),
    [signal('user-started-speaking'), ...finals.map((text) => frame('transcription', { text, final: true })), signal('user-stopped-speaking'), { sleepMs: 500 }],
    { allowInterruptions: true },
  );
  return context.messages().map((m) => String(m.content));
}

test('a final that trails off and is followed by more words loses its ellipsis', async (t) => {
  t.deepEqual(await turnText(['What can you…', 'do?']), ['What can you do?']);
  t.deepEqual(await turnText(['I would like...', 'a table for two.']), ['I would like a table for two.']);
  t.deepEqual(await turnText(['What is…', 'your…', 'name?']), ['What is your name?']);
});

test('a turn that ends trailing off keeps its ellipsis, and one inside a final stays', async (t) => {
  t.deepEqual(await turnText(['What can you…']), ['What can you…']);
  t.deepEqual(await turnText(['Well... I think so', 'yes.']), ['Well... I think so yes.']);
});
