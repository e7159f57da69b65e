/** ElevenLabs text-to-speech with word timings: registers `tts:elevenlabs`. */
import type { Plugin } from '../../core/registry.ts';
import { ElevenLabsTTSService, type ElevenLabsTTSOptions } from './tts.ts';

export { ElevenLabsTTSService, ELEVENLABS_TTS_DEFAULTS, ELEVENLABS_PCM_RATES, outputRateFor, type ElevenLabsTTSOptions } from './tts.ts';
export { ElevenLabsTTSError, type ElevenLabsTTSErrorCode } from './errors.ts';
export { WordAligner, type CharacterAlignment } from './alignment.ts';

export const elevenlabsPlugin: Plugin = {
  name: 'elevenlabs',
  register(registry) {
    registry.register<ElevenLabsTTSService, ElevenLabsTTSOptions>('tts', 'elevenlabs', (options) => new ElevenLabsTTSService(options), {
      label: 'ElevenLabs (HTTP streaming with character timestamps)',
    });
  },
};

export default elevenlabsPlugin;
