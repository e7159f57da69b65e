/** Cartesia (Sonic) WebSocket text-to-speech with word and phoneme timestamps: registers `tts:cartesia`. */
import type { Plugin } from '../../core/registry.ts';
import { CartesiaTTSService, type CartesiaTTSOptions } from './tts.ts';

export { CartesiaTTSService, CARTESIA_TTS_DEFAULTS, CARTESIA_RATES, type CartesiaTTSOptions } from './tts.ts';
export { CartesiaTTSError, type CartesiaTTSErrorCode } from './errors.ts';
export { TimingGate, phonemeTimings, wordTimings } from './timestamps.ts';

export const cartesiaPlugin: Plugin = {
  name: 'cartesia',
  register(registry) {
    registry.register<CartesiaTTSService, CartesiaTTSOptions>('tts', 'cartesia', (options) => new CartesiaTTSService(options), {
      label: 'Cartesia Sonic (WebSocket, word and phoneme timestamps)',
    });
  },
};

export default cartesiaPlugin;
