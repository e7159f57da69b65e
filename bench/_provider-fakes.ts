/**
 * The provider fakes of `bench -- voice`'s per-provider rows, in a process of their own: started
 * here, their addresses printed as one JSON line, stopped when the parent closes stdin (or dies).
 * In the bench's own process their work (synthesising the fake voices, TLS for Cartesia, the
 * multipart parsing of batch transcription) ran on the event loop the pipeline was measured on,
 * and counted as the framework's.
 */
import { startCartesiaFake } from '../test/fakes/cartesia.ts';
import { startDeepgramSpeakFake } from '../test/fakes/deepgram-speak.ts';
import { startOpenAIAudioFake } from '../test/fakes/openai-audio.ts';

export interface ProviderFakeAddresses {
  readonly audio: { readonly apiKey: string; readonly baseURL: string };
  readonly deepgram: { readonly apiKey: string; readonly url: string };
  readonly cartesia: { readonly apiKey: string; readonly baseUrl: string; readonly ca: string };
}

const settings = JSON.parse(process.argv[2] ?? '{}') as { question: string; sttFinalMs: number; ttsFirstAudioMs: number };
const audio = await startOpenAIAudioFake({ script: Array(1000).fill(settings.question), transcriptionDelayMs: settings.sttFinalMs, firstAudioDelayMs: settings.ttsFirstAudioMs });
const deepgram = await startDeepgramSpeakFake({ firstAudioDelayMs: settings.ttsFirstAudioMs });
const cartesia = await startCartesiaFake({ firstAudioDelayMs: settings.ttsFirstAudioMs });
const addresses: ProviderFakeAddresses = {
  audio: { apiKey: audio.apiKey, baseURL: audio.baseURL },
  deepgram: { apiKey: deepgram.apiKey, url: deepgram.url },
  cartesia: { apiKey: cartesia.apiKey, baseUrl: cartesia.baseUrl, ca: cartesia.ca },
};
process.stdout.write(`${JSON.stringify(addresses)}\n`);
const stop = () => void Promise.all([audio.close(), deepgram.close(), cartesia.close()]).finally(() => process.exit(0));
process.stdin.on('end', stop);
process.stdin.on('close', stop);
process.stdin.resume();
process.on('SIGTERM', stop);
