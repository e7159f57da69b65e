/** The text-to-speech contract suite, run by every TTS plugin we ship. */
import test from 'ava';
import { ttsContract } from '../../testing/index.ts';
import { ElevenLabsTTSService } from '../../plugins/elevenlabs/index.ts';
import { LocalTTSService } from '../../plugins/local/index.ts';
import { startElevenLabsFake, type ElevenLabsFake } from '../fakes/elevenlabs.ts';
import { registerContract } from './register.ts';

let fake: ElevenLabsFake | undefined;
test.before(async () => {
  fake = await startElevenLabsFake({ firstAudioDelayMs: 5 });
});
test.after.always(async () => {
  await fake?.close();
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
  'local',
  ttsContract({
    create: () => new LocalTTSService(),
    language: 'en',
  }),
);
