import test from 'ava';
import { DEFAULT_STT_PHRASES, EspeakEngine, LocalPhraseSTT, localPlugin, warmLocalEngines } from '../../plugins/local/index.ts';
import { templateTexts } from '../../plugins/local/phrase-recogniser.ts';

/** A real engine that counts the syntheses asked of it. */
class CountingEngine extends EspeakEngine {
  requests = 0;
  override async *synthesize(...args: Parameters<EspeakEngine['synthesize']>): ReturnType<EspeakEngine['synthesize']> {
    this.requests++;
    yield* super.synthesize(...args);
  }
}

// One test per file on purpose: the phrase templates are cached per process, and this test
// starts from an empty cache.
test('after warmLocalEngines, a session\'s offline speech-to-text has every template without one synthesis', async (t) => {
  t.is(typeof localPlugin.warmUp, 'function', 'npm start warms the local plugin through Registry.warmUp');
  const warming = new CountingEngine();
  const session = new CountingEngine();
  t.teardown(async () => {
    await warming.close();
    await session.close();
  });
  await warmLocalEngines({ engine: warming });
  // The phrases and their beginnings of two words or more ("What can", "What can you").
  const templates = templateTexts(DEFAULT_STT_PHRASES.en!).length;
  t.is(templates, DEFAULT_STT_PHRASES.en!.length + 8);
  t.is(warming.requests, templates + 1, 'one synthesis per English phrase template, and one short phrase');
  await new LocalPhraseSTT({ engine: session }).recogniserFor('en').ready();
  t.is(session.requests, 0, 'the first session finds the templates made');
});
