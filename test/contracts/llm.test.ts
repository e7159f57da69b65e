/** The language-model contract suite, run by every LLM plugin we ship. */
import test from 'ava';
import { llmContract } from '../../testing/index.ts';
import { OpenAILLMService } from '../../plugins/openai/index.ts';
import { LocalResponder } from '../../plugins/local/index.ts';
import { startOpenAIFake, type OpenAIFake } from '../fakes/openai.ts';
import { registerContract } from './register.ts';

const WEATHER_TOOL = {
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: { type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] },
};

let fake: OpenAIFake | undefined;
test.before(async () => {
  fake = await startOpenAIFake({
    firstTokenDelayMs: 5,
    respond: (body) =>
      Array.isArray(body.tools) && body.tools.length > 0
        ? { toolCalls: [{ name: 'get_weather', arguments: '{"city":"Paris"}' }] }
        : { text: 'I am a helpful assistant, here to answer your questions about anything at all.' },
  });
});
test.after.always(async () => {
  await fake?.close();
});

registerContract(
  'openai',
  llmContract({
    create: () => new OpenAILLMService({ apiKey: fake!.apiKey, baseUrl: fake!.baseURL, maxRetries: 0 }),
    refused: () => new OpenAILLMService({ apiKey: 'sk-not-the-key', baseUrl: fake!.baseURL, maxRetries: 0 }),
    toolCall: { messages: [{ role: 'user', content: 'What is the weather in Paris?' }], tool: WEATHER_TOOL },
  }),
);

registerContract(
  'local',
  llmContract({
    create: () => new LocalResponder(),
    messages: [
      { role: 'system', content: 'You are Ada.' },
      { role: 'user', content: 'What can you do?' },
    ],
    // The responder calls a tool when told "call tool <name>"; it asks for required arguments first.
    toolCall: { messages: [{ role: 'user', content: 'call tool get time' }], tool: { name: 'get_time', parameters: { type: 'object', properties: {} } } },
  }),
);
