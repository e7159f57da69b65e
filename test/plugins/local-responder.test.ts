import test from 'ava';
import { Ajv } from 'ajv';
import { isAbortError, VirtualClock } from '../../core/clock.ts';
import type { LLMMessage } from '../../core/frames.ts';
import { Registry } from '../../core/registry.ts';
import type { LLMEvent, LLMRequest, ToolDefinition } from '../../processors/services.ts';
import { LocalResponder, localPlugin, UNRECOGNISED_SPEECH } from '../../plugins/local/index.ts';

const weather: ToolDefinition = {
  name: 'get_weather',
  description: 'Current weather for a city',
  parameters: {
    type: 'object',
    properties: {
      city: { type: 'string' },
      days: { type: 'integer' },
      unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
      detailed: { type: 'boolean' },
    },
    required: ['city'],
  },
};
const endCall: ToolDefinition = { name: 'end_call', parameters: { type: 'object', properties: {} } };
const system = (content: string): LLMMessage => ({ role: 'system', content });
const user = (content: string): LLMMessage => ({ role: 'user', content });

async function run(request: LLMRequest, responder = new LocalResponder()): Promise<LLMEvent[]> {
  const events: LLMEvent[] = [];
  for await (const e of responder.stream(request)) events.push(e);
  return events;
}
const textOf = (events: LLMEvent[]) => events.map((e) => (e.type === 'text' ? e.text : '')).join('');
function toolCallOf(events: LLMEvent[]): { id?: string; name?: string; arguments: string } {
  const deltas = events.filter((e) => e.type === 'tool-call-delta');
  return {
    id: deltas.find((d) => d.id)?.id,
    name: deltas.find((d) => d.name)?.name,
    arguments: deltas.map((d) => d.argumentsDelta ?? '').join(''),
  };
}

test('answers the same conversation the same way, tool-call ids included', async (t) => {
  const chat: LLMRequest = { messages: [system('You are a helpful assistant.'), user('Call tool get_weather with city Paris')], tools: [weather] };
  t.deepEqual(await run(chat), await run(chat));
  const small = { messages: [system('x'), user('Tell me a joke')] };
  t.deepEqual(await run(small), await run(small));
  t.notDeepEqual(textOf(await run(small)), textOf(await run({ messages: [system('x'), user('Thank you')] })));
});

test('streams text in word-sized deltas, then usage, then done', async (t) => {
  const events = await run({ messages: [system('x'), user('What can you do?')] });
  const texts = events.filter((e) => e.type === 'text');
  t.true(texts.length > 10, `${texts.length} deltas`);
  for (const e of texts) t.regex(e.text, /^\S+\s*$/, 'one word per delta');
  t.regex(textOf(events), /offline stand-in/);
  t.deepEqual(events.slice(-2).map((e) => e.type), ['usage', 'done']);
  const done = events.at(-1) as Extract<LLMEvent, { type: 'done' }>;
  t.is(done.finishReason, 'stop');
});

test('answers in the language pinned by the last system message', async (t) => {
  const french = textOf(await run({ messages: [system('You are Ada. Always answer in French.')] }));
  t.regex(french, /^Bonjour ! Je suis Ada/);
  const german = textOf(await run({ messages: [system('Du bist hilfreich. Antworte immer auf Deutsch.'), user('Wie geht es dir?')] }));
  t.regex(german, /Mir geht es gut/);
  const spanish = textOf(await run({ messages: [system('Respond in English.'), system('Language pin: always respond in Spanish.'), user('hello')] }));
  t.regex(spanish, /Hola/);
  // The pin LLMContext appends (processors/llm/context.ts), after an owner prompt naming another language.
  const pinned = textOf(await run({ messages: [system('Answer in English.\n\nAlways respond in German (language code "de"), whatever language the user writes in.'), user('hello')] }));
  t.regex(pinned, /^Hallo!/);
  const fallback = textOf(await run({ messages: [system('Always answer in Japanese.'), user('hello')] }));
  t.regex(fallback, /^Hello!/, 'languages without phrases fall back to English');
});

test('generates greeting, nudge and farewell when instructed', async (t) => {
  t.regex(textOf(await run({ messages: [system('You are Max, a concierge.')] })), /^Hello! I am Max, an offline stand-in/);
  t.regex(textOf(await run({ messages: [system('You are a helpful assistant.'), system('Greet the user.')] })), /I am your assistant/);
  const history = [system('x'), user('hello'), { role: 'assistant' as const, content: 'Hello! Nice to hear from you.' }];
  t.regex(textOf(await run({ messages: [...history, system('The user has been silent for a while; check whether they are still there.')] })), /still there/);
  t.regex(textOf(await run({ messages: [...history, system('The conversation is ending: say goodbye.')] })), /Goodbye!$/);
  // The instructions the conversation behaviours send (processors/behaviours).
  const tagged = async (content: string) => textOf(await run({ messages: [...history, system(content)] }));
  t.regex(await tagged('[greeting] Greet the user to open the conversation, in one or two short sentences.'), /^Hello! I am/);
  t.regex(await tagged('[nudge] The user has been silent for a while. Gently check whether they are still there.'), /^Are you still there\?/);
  t.regex(await tagged('[farewell] The conversation is ending. Say goodbye to the user, in one short sentence.'), /Goodbye!$/);
  t.is(await tagged('[farewell] The conversation is ending. Say goodbye. Base it on: "See you soon, take care."'), 'See you soon, take care.');
});

test('calls a tool by the documented phrase, with arguments valid against its schema', async (t) => {
  const validate = new Ajv({ strict: false }).compile({ ...weather.parameters, additionalProperties: false });
  const cases: Array<[string, Record<string, unknown>]> = [
    ['Call tool get_weather with city Paris and days 3 and unit Celsius.', { city: 'Paris', days: 3, unit: 'celsius' }],
    ['use get weather with city New York, detailed yes', { city: 'New York', detailed: true }],
    ['please call get_weather with {"city": "Berlin", "days": "2"}', { city: 'Berlin', days: 2 }],
    ['appelle l\'outil get_weather avec city Lyon', { city: 'Lyon' }],
  ];
  for (const [phrase, expected] of cases) {
    const events = await run({ messages: [system('x'), user(phrase)], tools: [weather, endCall] });
    const call = toolCallOf(events);
    t.is(call.name, 'get_weather', phrase);
    t.regex(call.id ?? '', /^call_local_[0-9a-f]{8}$/);
    const args = JSON.parse(call.arguments);
    t.true(validate(args), `${phrase}: ${JSON.stringify(validate.errors)}`);
    t.deepEqual(args, expected, phrase);
    t.true(events.filter((e) => e.type === 'tool-call-delta').length > 2, 'arguments stream in pieces');
    t.is((events.at(-1) as { finishReason: string }).finishReason, 'tool_calls');
    t.is(textOf(events), '');
  }
});

test('asks for missing required arguments and names its tools for an unknown one', async (t) => {
  const missing = await run({ messages: [system('x'), user('call get_weather')], tools: [weather] });
  t.is(toolCallOf(missing).name, undefined);
  t.is(textOf(missing), 'To use get weather, I need city.');
  const unknown = await run({ messages: [system('x'), user('call the tool launch_rocket')], tools: [weather, endCall] });
  t.is(textOf(unknown), 'I do not have that tool. My tools are: get weather.');
  const noTools = await run({ messages: [system('x'), user('call tool get_weather with city Paris')] });
  t.regex(textOf(noTools), /^You said:/, 'with no tools offered nothing is called');
});

test('hangs up with end_call when offered, and says goodbye otherwise', async (t) => {
  for (const words of ['Goodbye!', 'Please hang up now', 'Au revoir', 'Auf Wiedersehen']) {
    const call = toolCallOf(await run({ messages: [system('x'), user(words)], tools: [weather, endCall] }));
    t.is(call.name, 'end_call', words);
    t.deepEqual(JSON.parse(call.arguments), {});
  }
  const withReason: ToolDefinition = { name: 'end_call', parameters: { type: 'object', properties: { reason: { type: 'string' } }, required: ['reason'] } };
  const reasoned = toolCallOf(await run({ messages: [system('x'), user('bye')], tools: [withReason] }));
  t.is(typeof JSON.parse(reasoned.arguments).reason, 'string');
  t.is(textOf(await run({ messages: [system('x'), user('Goodbye')] })), 'Goodbye!');
});

test('speaks about a tool result, and about a tool failure', async (t) => {
  const history: LLMMessage[] = [
    system('x'),
    user('call tool get_weather with city Paris'),
    { role: 'assistant', content: null, toolCalls: [{ toolCallId: 'c1', name: 'get_weather', arguments: '{"city":"Paris"}' }] },
  ];
  const ok = await run({ messages: [...history, { role: 'tool', toolCallId: 'c1', content: JSON.stringify({ temperature: 21, conditions: 'sunny' }) }], tools: [weather] });
  t.is(textOf(ok), 'The get weather tool returned temperature 21, conditions sunny.');
  const failed = await run({ messages: [...history, { role: 'tool', toolCallId: 'c1', content: JSON.stringify({ error: 'timeout' }) }], tools: [weather] });
  t.is(textOf(failed), 'The get weather tool failed: timeout.');
});

test('small talk, unrecognised speech and echo', async (t) => {
  const say = async (words: string) => textOf(await run({ messages: [system('You are Ada.'), user(words)] }));
  t.is(await say('Hi, how are you?'), 'I am doing well, thank you for asking.');
  t.regex(await say('What is your name?'), /^I am Ada, an offline stand-in/);
  t.regex(await say(UNRECOGNISED_SPEECH), /did not understand/);
  t.is(await say('The quick brown fox'), 'You said: The quick brown fox');
  t.regex(await say('Hi, who are you?'), /^I am Ada/);
  t.is(await say('Hello'), 'Hello! Nice to hear from you.');
});

test('stops with an AbortError when the signal aborts, even before the first delta', async (t) => {
  const controller = new AbortController();
  const received: LLMEvent[] = [];
  const err = await t.throwsAsync(async () => {
    for await (const e of new LocalResponder().stream({ messages: [system('x'), user('What can you do?')], signal: controller.signal })) {
      received.push(e);
      if (received.length === 2) controller.abort();
    }
  }, { any: true });
  t.true(isAbortError(err));
  t.is(received.length, 2);
  const early = await t.throwsAsync(run({ messages: [user('hello')], signal: AbortSignal.abort() }), { any: true });
  t.true(isAbortError(early));
});

test('reports estimated usage and honours maxTokens', async (t) => {
  const short = await run({ messages: [system('x'), user('What can you do?')] });
  const long = await run({ messages: [system('x'.repeat(4000)), user('What can you do?')] });
  const usage = (events: LLMEvent[]) => events.find((e) => e.type === 'usage') as Extract<LLMEvent, { type: 'usage' }>;
  t.true(usage(long).promptTokens >= usage(short).promptTokens + 900);
  t.true(usage(short).completionTokens >= textOf(short).length / 5);
  const capped = await run({ messages: [system('x'), user('What can you do?')], maxTokens: 5 });
  t.true(textOf(capped).length <= 20 && textOf(capped).length > 0, textOf(capped));
  t.is((capped.at(-1) as { finishReason: string }).finishReason, 'length');
});

test('paces deltas on the given clock', async (t) => {
  const clock = new VirtualClock();
  const responder = new LocalResponder({ clock, firstDeltaDelayMs: 300, deltaDelayMs: 50 });
  const events: LLMEvent[] = [];
  const done = (async () => {
    for await (const e of responder.stream({ messages: [system('x'), user('Thank you')] })) events.push(e);
  })();
  await clock.advance(299);
  t.is(events.length, 0);
  await clock.advance(1);
  t.is(events.length, 1);
  await clock.advance(50);
  t.is(events.length, 2);
  await clock.advance(1000);
  await done;
  t.is(textOf(events), 'You are welcome.');
});

test('the plugin registers the five offline engines', (t) => {
  const registry = new Registry().use(localPlugin);
  t.deepEqual(['tts', 'stt', 'vad', 'llm'].map((kind) => registry.slugs(kind)), [['local'], ['local', 'moonshine'], ['local'], ['local']]);
  t.regex(registry.info('llm', 'local').label ?? '', /stand-in/);
  t.regex(registry.info('stt', 'local').label ?? '', /stand-in/);
  t.regex(registry.info('stt', 'moonshine').label ?? '', /Moonshine/);
  t.is(registry.create<LocalResponder>('llm', 'local', { wordsPerDelta: undefined }).name, 'local-responder');
  t.is(registry.create<{ windowSamples: number }>('vad', 'local', { sampleRate: 48000, windowMs: 10 }).windowSamples, 480);
});
