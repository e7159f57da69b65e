/** The text-to-speech contract suite, run by every TTS plugin we ship. */
import test from 'ava';
import { ttsContract } from '../../testing/index.ts';
import { ElevenLabsTTSService } from '../../plugins/elevenlabs/index.ts';
import { LocalTTSService } from '../../plugins/local/index.ts';
import { OpenAITTSService } from '../../plugins/openai/index.ts';
import { DeepgramTTSService } from '../../plugins/deepgram/index.ts';
import { CartesiaTTSService } from '../../plugins/cartesia/index.ts';
import { startCartesiaFake, type CartesiaFake } from '../fakes/cartesia.ts';
import { startDeepgramSpeakFake, type DeepgramSpeakFake } from '../fakes/deepgram-speak.ts';
import { startElevenLabsFake, type ElevenLabsFake } from '../fakes/elevenlabs.ts';
import { startOpenAIAudioFake, type OpenAIAudioFake } from '../fakes/openai-audio.ts';
import { registerContract } from './register.ts';

let fake: ElevenLabsFake | undefined;
let openai: OpenAIAudioFake | undefined;
let deepgram: DeepgramSpeakFake | undefined;
let cartesia: CartesiaFake | undefined;
test.before(async () => {
  cartesia = await startCartesiaFake({ firstAudioDelayMs: 5, chunkMs: 50 });
  deepgram = await startDeepgramSpeakFake({ firstAudioDelayMs: 5, chunkMs: 50 });
  fake = await startElevenLabsFake({ firstAudioDelayMs: 5 });
  openai = await startOpenAIAudioFake({ firstAudioDelayMs: 5, chunkMs: 50 });
});
test.after.always(async () => {
  await fake?.close();
  await openai?.close();
  await deepgram?.close();
  await cartesia?.close();
});

registerContract(
  'elevenlabs',
  ttsContract({
    create: () => new ElevenLabsTTSService({ apiKey: fake!.apiKey, baseUrl: fake!.baseUrl }),
    refused: () => new ElevenLabsTTSService({ apiKey: 'not-the-key', baseUrl: fake!.baseUrl }),
    voiceId: '21m00Tcm4TlvDq8ikWAM',
  }),
);

registerContract(
  'openai',
  ttsContract({
    create: () => new OpenAITTSService({ apiKey: openai!.apiKey, baseUrl: openai!.baseURL }, {}),
    refused: () => new OpenAITTSService({ apiKey: 'sk-not-the-key', baseUrl: openai!.baseURL }, {}),
    voiceId: 'alloy',
  }),
);

registerContract(
  'deepgram',
  ttsContract({
    create: () => new DeepgramTTSService({ apiKey: deepgram!.apiKey, baseUrl: deepgram!.url, idleCloseMs: 200 }, {}),
    refused: () => new DeepgramTTSService({ apiKey: 'not-the-key', baseUrl: deepgram!.url }, {}),
  }),
);

registerContract(
  'cartesia',
  ttsContract({
    create: () => new CartesiaTTSService({ apiKey: cartesia!.apiKey, baseUrl: cartesia!.baseUrl, tls: { ca: cartesia!.ca }, idleCloseMs: 200 }, {}),
    refused: () => new CartesiaTTSService({ apiKey: 'sk_car_not_the_key', baseUrl: cartesia!.baseUrl, tls: { ca: cartesia!.ca } }, {}),
  }),
);

registerContract(
  'local',
  ttsContract({
    create: () => new LocalTTSService(),
    language: 'en',
  }),
);
