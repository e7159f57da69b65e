/** The speech-to-speech contract suite, run by every speech-to-speech plugin we ship. */
import test from 'ava';
import { s2sContract } from '../../testing/index.ts';
import { OpenAIRealtimeS2SService } from '../../plugins/openai-realtime/index.ts';
import { ElevenLabsConvaiS2SService } from '../../plugins/elevenlabs-convai/index.ts';
import { startOpenAIRealtimeFake, type OpenAIRealtimeFake } from '../fakes/openai-realtime.ts';
import { startElevenLabsConvaiFake, type ElevenLabsConvaiFake } from '../fakes/elevenlabs-convai.ts';
import { registerContract } from './register.ts';

/** A tone burst (speech to the fakes' energy turn detectors), then silence that ends the turn. */
function userSpeech(rate: number): Int16Array {
  const speechSamples = Math.round(rate * 0.4);
  const pcm = new Int16Array(Math.round(rate * 1.1));
  for (let i = 0; i < speechSamples; i++) pcm[i] = Math.round(9000 * Math.sin((2 * Math.PI * 220 * i) / rate));
  return pcm;
}

let openai: OpenAIRealtimeFake | undefined;
let convai: ElevenLabsConvaiFake | undefined;
test.before(async () => {
  openai = await startOpenAIRealtimeFake({ replies: Array(10).fill('Sunny and warm all day today') });
  convai = await startElevenLabsConvaiFake({ replies: Array(10).fill('Happy to help with that') });
});
test.after.always(async () => {
  await Promise.all([openai?.close(), convai?.close()]);
});

registerContract(
  'openai-realtime',
  s2sContract({
    create: () => new OpenAIRealtimeS2SService({ baseURL: openai!.baseURL, tls: { ca: openai!.ca }, connectTimeoutMs: 5_000 }),
    get connect() {
      return { apiKey: openai!.apiKey, configId: null, providerConfig: {}, instructions: 'You are Ada.', language: 'en' };
    },
    userSpeech,
    refusedApiKey: 'sk-not-the-key',
  }),
);

registerContract(
  'elevenlabs-convai',
  s2sContract({
    create: () => new ElevenLabsConvaiS2SService({ baseUrl: convai!.baseUrl, connectTimeoutMs: 5_000, turnGapMs: 400 }),
    get connect() {
      return { apiKey: convai!.apiKey, configId: 'agent_fake_ada', providerConfig: {}, language: 'en' };
    },
    userSpeech,
    refusedApiKey: 'xi-not-the-key',
  }),
);
