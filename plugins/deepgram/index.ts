/** Deepgram: registers `stt:deepgram` (live transcription) and `tts:deepgram` (Aura, streaming speak). */
import type { Plugin } from '../../core/registry.ts';
import { DeepgramSTTService, type DeepgramSTTOptions } from './stt.ts';
import { DeepgramTTSService, type DeepgramTTSOptions } from './tts.ts';

export { DeepgramSTTService, DEEPGRAM_STT_DEFAULTS, type DeepgramSTTOptions } from './stt.ts';
export { DeepgramTTSService, DEEPGRAM_TTS_DEFAULTS, DEEPGRAM_SPEAK_RATES, type DeepgramTTSOptions } from './tts.ts';
export { DeepgramSTTError, DeepgramTTSError, type DeepgramSTTErrorCode, type DeepgramTTSErrorCode } from './errors.ts';
export { toTranscriptEvent } from './transcripts.ts';

export const deepgramPlugin: Plugin = {
  name: 'deepgram',
  register(registry) {
    registry.register<DeepgramSTTService, DeepgramSTTOptions>('stt', 'deepgram', (options) => new DeepgramSTTService(options), {
      label: 'Deepgram live transcription (WebSocket, listen v1)',
    });
    registry.register<DeepgramTTSService, DeepgramTTSOptions>('tts', 'deepgram', (options) => new DeepgramTTSService(options), {
      label: 'Deepgram Aura (streaming speak WebSocket, Flush and Clear)',
    });
  },
};

export default deepgramPlugin;
