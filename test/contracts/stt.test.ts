/** The speech-to-text contract suite, run by every STT plugin we ship. */
import test from 'ava';
import { concat, silence } from '../../core/index.ts';
import { sttContract } from '../../testing/index.ts';
import { DeepgramSTTService } from '../../plugins/deepgram/index.ts';
import { LocalPhraseSTT, LocalTTSService } from '../../plugins/local/index.ts';
import { OpenAISTTService } from '../../plugins/openai/index.ts';
import { startDeepgramFake, type DeepgramFake } from '../fakes/deepgram.ts';
import { startOpenAIAudioFake, type OpenAIAudioFake } from '../fakes/openai-audio.ts';
import { registerContract } from './register.ts';

const RATE = 16_000;
let fake: DeepgramFake | undefined;
let openai: OpenAIAudioFake | undefined;
test.before(async () => {
  fake = await startDeepgramFake({ script: ['what can you do'], finalDelayMs: 50 });
  // The script repeats: each check transcribes the same utterance once more.
  openai = await startOpenAIAudioFake({ script: Array(20).fill('What can you do?'), transcriptionDelayMs: 30 });
});
test.after.always(async () => {
  await fake?.close();
  await openai?.close();
});

/** Speech made by the offline TTS (what the phrase recogniser and the fake's VAD both hear). */
async function spoken(text: string): Promise<Int16Array> {
  const parts: Int16Array[] = [silence(200, RATE)];
  for await (const e of new LocalTTSService().synthesize({ text, sampleRate: RATE })) if (e.type === 'audio') parts.push(e.pcm);
  return concat([...parts, silence(1000, RATE)]);
}

registerContract(
  'deepgram',
  sttContract({
    create: () => new DeepgramSTTService({ apiKey: fake!.apiKey, baseUrl: fake!.url }),
    refused: () => new DeepgramSTTService({ apiKey: 'not-the-key', baseUrl: fake!.url }),
    speech: () => spoken('What can you do?'),
    sampleRate: RATE,
    expectedText: 'what can you do',
  }),
);

for (const mode of ['realtime', 'batch'] as const) {
  registerContract(
    `openai ${mode}`,
    sttContract({
      create: () => new OpenAISTTService({ apiKey: openai!.apiKey, baseUrl: openai!.baseURL, mode }, {}),
      refused: () => new OpenAISTTService({ apiKey: 'sk-not-the-key', baseUrl: openai!.baseURL, mode }, {}),
      speech: () => spoken('What can you do?'),
      sampleRate: RATE,
      expectedText: 'what can you do',
    }),
  );
}

registerContract(
  'local',
  sttContract({
    create: () => new LocalPhraseSTT(),
    speech: () => spoken('What can you do?'),
    sampleRate: RATE,
    expectedText: /what can you do/i,
  }),
);
