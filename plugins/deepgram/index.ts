/** Deepgram live speech-to-text: registers `stt:deepgram`. */
import type { Plugin } from '../../core/registry.ts';
import { DeepgramSTTService, type DeepgramSTTOptions } from './stt.ts';

export { DeepgramSTTService, DEEPGRAM_STT_DEFAULTS, type DeepgramSTTOptions } from './stt.ts';
export { DeepgramSTTError, type DeepgramSTTErrorCode } from './errors.ts';
export { toTranscriptEvent } from './transcripts.ts';

export const deepgramPlugin: Plugin = {
  name: 'deepgram',
  register(registry) {
    registry.register<DeepgramSTTService, DeepgramSTTOptions>('stt', 'deepgram', (options) => new DeepgramSTTService(options), {
      label: 'Deepgram live transcription (WebSocket, listen v1)',
    });
  },
};

export default deepgramPlugin;
