/** OpenAI (and OpenAI-compatible) language models: registers `llm:openai`. */
import type { Plugin } from '../../core/registry.ts';
import { OpenAILLMService, type OpenAILLMOptions } from './llm.ts';

export { OpenAILLMService, OPENAI_LLM_DEFAULTS, type OpenAILLMOptions } from './llm.ts';
export { OpenAILLMError, type OpenAILLMErrorCode } from './errors.ts';
export { toChatMessages, toChatTools } from './messages.ts';

export const openaiPlugin: Plugin = {
  name: 'openai',
  register(registry) {
    registry.register<OpenAILLMService, OpenAILLMOptions>('llm', 'openai', (options) => new OpenAILLMService(options), {
      label: 'OpenAI Chat Completions (or any OpenAI-compatible server via baseUrl / OPENAI_BASE_URL)',
    });
  },
};

export default openaiPlugin;
