/**
 * OpenAI (and OpenAI-compatible servers): registers `llm:openai` (Chat Completions), `stt:openai`
 * (Realtime transcription, or `/v1/audio/transcriptions` in batch mode) and `tts:openai`
 * (`/v1/audio/speech`, streamed PCM).
 */
import type { Plugin } from '../../core/registry.ts';
import { OpenAILLMService, type OpenAILLMOptions } from './llm.ts';
import { OpenAISTTService, type OpenAISTTOptions } from './stt.ts';
import { OpenAITTSService, type OpenAITTSOptions } from './tts.ts';

export { OpenAILLMService, OPENAI_LLM_DEFAULTS, type OpenAILLMOptions } from './llm.ts';
export { OpenAISTTService, OPENAI_STT_DEFAULTS, type OpenAISTTOptions } from './stt.ts';
export { REALTIME_AUDIO_RATE, realtimeUrl } from './stt-realtime.ts';
export { OpenAITTSService, OPENAI_TTS_DEFAULTS, OPENAI_TTS_VOICES, type OpenAITTSOptions } from './tts.ts';
export { OpenAILLMError, OpenAIAudioError, type OpenAILLMErrorCode, type OpenAIAudioErrorCode } from './errors.ts';
export { toChatMessages, toChatTools } from './messages.ts';

export const openaiPlugin: Plugin = {
  name: 'openai',
  register(registry) {
    registry.register<OpenAILLMService, OpenAILLMOptions>('llm', 'openai', (options) => new OpenAILLMService(options), {
      label: 'OpenAI Chat Completions (or any OpenAI-compatible server via baseUrl / OPENAI_BASE_URL)',
    });
    registry.register<OpenAISTTService, OpenAISTTOptions>('stt', 'openai', (options) => new OpenAISTTService(options), {
      label: 'OpenAI speech-to-text: Realtime transcription, or /v1/audio/transcriptions in batch mode (OpenAI-compatible servers via OPENAI_STT_BASE_URL)',
    });
    registry.register<OpenAITTSService, OpenAITTSOptions>('tts', 'openai', (options) => new OpenAITTSService(options), {
      label: 'OpenAI /v1/audio/speech, streamed PCM (OpenAI-compatible servers via OPENAI_TTS_BASE_URL)',
    });
  },
};

export default openaiPlugin;
