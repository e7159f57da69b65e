/**
 * Local fakes of the cloud vendors, each speaking the vendor's real wire protocol, for tests
 * and benchmarks. `startVendorFakes` starts all three and hands back the plugin options that
 * point each plugin's SDK at its fake.
 */
import type { Clock } from '../../core/clock.ts';
import { startDeepgramFake, type DeepgramFake, type DeepgramFakeOptions } from './deepgram.ts';
import { startElevenLabsFake, type ElevenLabsFake, type ElevenLabsFakeOptions } from './elevenlabs.ts';
import { startOpenAIFake, type OpenAIFake, type OpenAIFakeOptions } from './openai.ts';

export * from './deepgram.ts';
export * from './elevenlabs.ts';
export * from './openai.ts';

export interface VendorFakesOptions {
  readonly deepgram?: DeepgramFakeOptions;
  readonly openai?: OpenAIFakeOptions;
  readonly elevenlabs?: ElevenLabsFakeOptions;
  /** Shared time source for every fake's latencies (overridden by a per-fake `clock`). */
  readonly clock?: Clock;
}

export interface VendorFakes {
  readonly deepgram: DeepgramFake;
  readonly openai: OpenAIFake;
  readonly elevenlabs: ElevenLabsFake;
  /** Options for `registry.create('stt' | 'llm' | 'tts', <slug>, ...)` that reach these fakes. */
  readonly pluginOptions: {
    readonly stt: { apiKey: string; baseUrl: string };
    readonly llm: { apiKey: string; baseUrl: string };
    readonly tts: { apiKey: string; baseUrl: string };
  };
  close(): Promise<void>;
}

export async function startVendorFakes(options: VendorFakesOptions = {}): Promise<VendorFakes> {
  const withClock = <T extends { clock?: Clock }>(o: T | undefined): T => ({ ...(options.clock ? { clock: options.clock } : {}), ...(o ?? {}) }) as T;
  const [deepgram, openai, elevenlabs] = await Promise.all([
    startDeepgramFake(withClock(options.deepgram)),
    startOpenAIFake(withClock(options.openai)),
    startElevenLabsFake(withClock(options.elevenlabs)),
  ]);
  return {
    deepgram,
    openai,
    elevenlabs,
    pluginOptions: {
      stt: { apiKey: deepgram.apiKey, baseUrl: deepgram.url },
      llm: { apiKey: openai.apiKey, baseUrl: openai.baseURL },
      tts: { apiKey: elevenlabs.apiKey, baseUrl: elevenlabs.baseUrl },
    },
    close: async () => {
      await Promise.all([deepgram.close(), openai.close(), elevenlabs.close()]);
    },
  };
}
