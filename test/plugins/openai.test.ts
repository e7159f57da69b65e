import test from 'ava';
import { holdsWithin, until } from '../../testing/until.ts';
import { Registry } from '../../core/registry.ts';
import { VirtualClock, isAbortError } from '../../core/clock.ts';
import type { LLMEvent, LLMService } from '../../processors/services.ts';
import { OpenAILLMError, OpenAILLMService, openaiPlugin } from '../../plugins/openai/index.ts';
import { startOpenAIFake, type OpenAIFake } from '../fakes/openai.ts';

async function collect(iterable: AsyncIterable<LLMEvent>): Promise<LLMEvent[]> {
  const events: LLMEvent[] = [];
  for await (const e of iterable) events.push(e);
  return events;
}

/** What the LLM processor does with deltas: one entry per `index`, arguments concatenated. */
function accumulateToolCalls(events: readonly LLMEvent[]) {
  const calls = new Map<number, { id: string; name: string; arguments: string }>();
  for (const e of events) {
    if (e.type !== 'tool-call-delta') continue;
    const call = calls.get(e.index) ?? { id: '', name: '', arguments: '' };
    if (e.id) call.id = e.id;
    if (e.name) call.name += e.name;
    if (e.argumentsDelta) call.arguments += e.argumentsDelta;
    calls.set(e.index, call);
  }
  return [...calls.values()];
}

function service(fake: OpenAIFake, extra: Record<string, unknown> = {}): LLMService {
  return new OpenAILLMService({ apiKey: fake.apiKey, baseUrl: fake.baseURL, model: 'gpt-test', ...extra });
}

test('streams the reply as text deltas, then usage, then done', async (t) => {
  const fake = await startOpenAIFake({ replies: [{ text: 'The weather in Paris is mild today.' }] });
  t.teardown(() => fake.close());
  const events = await collect(service(fake).stream({ messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Weather?' }] }));

  const texts = events.filter((e) => e.type === 'text');
  t.true(texts.length > 1, 'the answer arrives in several deltas');
  t.is(texts.map((e) => (e as { text: string }).text).join(''), 'The weather in Paris is mild today.');
  const usage = events.find((e) => e.type === 'usage');
  t.truthy(usage);
  t.is((usage as { completionTokens: number }).completionTokens, 7);
  t.true((usage as { promptTokens: number }).promptTokens > 0);
  t.deepEqual(events.at(-1), { type: 'done', finishReason: 'stop' });

  const sent = fake.requests[0]!.body;
  t.is(sent.model, 'gpt-test');
  t.true(sent.stream);
  t.deepEqual(sent.stream_options, { include_usage: true });
  t.deepEqual(sent.messages, [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Weather?' }]);
  t.is(fake.requests[0]!.headers.authorization, `Bearer ${fake.apiKey}`);
});

test('tool calls split across many deltas accumulate into complete calls', async (t) => {
  const args1 = JSON.stringify({ city: 'Paris', unit: 'celsius' });
  const args2 = JSON.stringify({ query: 'opening hours of the Louvre' });
  const fake = await startOpenAIFake({
    argumentChunkChars: 5,
    replies: [{ toolCalls: [{ id: 'call_weather', name: 'get_weather', arguments: args1 }, { id: 'call_search', name: 'search', arguments: args2 }] }],
  });
  t.teardown(() => fake.close());
  const tools = [
    { name: 'get_weather', description: 'Weather for a city', parameters: { type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] } },
    { name: 'search', parameters: { type: 'object' as const, properties: { query: { type: 'string' } } } },
  ];
  const events = await collect(service(fake).stream({ messages: [{ role: 'user', content: 'Weather and Louvre hours?' }], tools }));

  const deltas = events.filter((e) => e.type === 'tool-call-delta');
  t.true(deltas.length > 10, `arguments were streamed in pieces (${deltas.length} deltas)`);
  const calls = accumulateToolCalls(events);
  t.deepEqual(calls, [
    { id: 'call_weather', name: 'get_weather', arguments: args1 },
    { id: 'call_search', name: 'search', arguments: args2 },
  ]);
  t.deepEqual(JSON.parse(calls[0]!.arguments), { city: 'Paris', unit: 'celsius' });
  t.deepEqual(events.at(-1), { type: 'done', finishReason: 'tool_calls' });
  t.deepEqual(fake.requests[0]!.body.tools, [
    { type: 'function', function: { name: 'get_weather', description: 'Weather for a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } },
    { type: 'function', function: { name: 'search', parameters: { type: 'object', properties: { query: { type: 'string' } } } } },
  ]);
});

test('a tool round-trip in the history maps to assistant tool_calls and tool messages the API accepts', async (t) => {
  const fake = await startOpenAIFake({ replies: [{ text: 'It is 18 degrees.' }] });
  t.teardown(() => fake.close());
  const events = await collect(service(fake).stream({
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, toolCalls: [{ toolCallId: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' }] },
      { role: 'tool', toolCallId: 'call_1', content: '{"celsius":18}' },
    ],
  }));
  t.deepEqual(events.at(-1), { type: 'done', finishReason: 'stop' });
  t.deepEqual(fake.requests[0]!.body.messages.slice(1), [
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"celsius":18}' },
  ]);
});

test('a history the API would refuse surfaces its 400 as bad_request', async (t) => {
  const fake = await startOpenAIFake();
  t.teardown(() => fake.close());
  const err = await t.throwsAsync(collect(service(fake).stream({
    messages: [
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: null, toolCalls: [{ toolCallId: 'call_9', name: 'x', arguments: '{}' }] },
      { role: 'user', content: 'and?' },
    ],
  })), { instanceOf: OpenAILLMError });
  t.is(err!.code, 'bad_request');
  t.is(err!.status, 400);
  t.regex(err!.message, /call_9/);
});

test('a tool message without toolCallId is refused before any request', async (t) => {
  const fake = await startOpenAIFake();
  t.teardown(() => fake.close());
  const err = await t.throwsAsync(collect(service(fake).stream({ messages: [{ role: 'tool', content: 'x' }] })), { instanceOf: OpenAILLMError });
  t.is(err!.code, 'bad_request');
  t.is(fake.requests.length, 0);
});

test('maxTokens is sent as max_tokens to compatible servers and cuts the answer (finish length)', async (t) => {
  const fake = await startOpenAIFake({ replies: [{ text: 'one two three four five six' }, { text: 'one two three four five six' }] });
  t.teardown(() => fake.close());
  const events = await collect(service(fake).stream({ messages: [{ role: 'user', content: 'count' }], maxTokens: 3 }));
  t.is(fake.requests[0]!.body.max_tokens, 3);
  t.is(fake.requests[0]!.body.max_completion_tokens, undefined);
  t.is(events.filter((e) => e.type === 'text').map((e) => (e as { text: string }).text).join(''), 'one two three');
  t.deepEqual(events.at(-1), { type: 'done', finishReason: 'length' });

  await collect(service(fake, { maxTokensParameter: 'max_completion_tokens' }).stream({ messages: [{ role: 'user', content: 'count' }], maxTokens: 4 }));
  t.is(fake.requests[1]!.body.max_completion_tokens, 4);
  t.is(fake.requests[1]!.body.max_tokens, undefined);
});

test('aborting mid-stream throws an AbortError and closes the HTTP stream', async (t) => {
  const fake = await startOpenAIFake({ tokenIntervalMs: 30, replies: [{ text: 'a b c d e f g h i j k l m n o p' }] });
  t.teardown(() => fake.close());
  const controller = new AbortController();
  const seen: LLMEvent[] = [];
  const err = await t.throwsAsync(async () => {
    for await (const e of service(fake).stream({ messages: [{ role: 'user', content: 'go' }], signal: controller.signal })) {
      seen.push(e);
      if (seen.length === 2) controller.abort();
    }
  });
  t.true(isAbortError(err), `got ${err?.name}: ${err?.message}`);
  t.false(seen.some((e) => e.type === 'done'));
  await until(() => fake.clientAborts > 0, { timeoutMs: 1000, what: 'the fake to see the client abort' });
  t.is(fake.clientAborts, 1, 'the server saw the client go away');
});

test('a wrong key fails with auth_failed and OpenAI\'s own message', async (t) => {
  const fake = await startOpenAIFake();
  t.teardown(() => fake.close());
  const llm = new OpenAILLMService({ apiKey: 'sk-wrong-key-123456', baseUrl: fake.baseURL });
  const err = await t.throwsAsync(collect(llm.stream({ messages: [{ role: 'user', content: 'hi' }] })), { instanceOf: OpenAILLMError });
  t.is(err!.code, 'auth_failed');
  t.is(err!.status, 401);
  t.regex(err!.message, /Incorrect API key provided/);
});

test('a connection dropped mid-stream surfaces as connection_lost after the partial answer', async (t) => {
  const fake = await startOpenAIFake({ dropAfterChunks: 4, replies: [{ text: 'this answer will never be finished by the server' }] });
  t.teardown(() => fake.close());
  const seen: LLMEvent[] = [];
  const err = await t.throwsAsync(async () => {
    for await (const e of service(fake).stream({ messages: [{ role: 'user', content: 'go' }] })) seen.push(e);
  }, { instanceOf: OpenAILLMError });
  t.is(err!.code, 'connection_lost');
  t.true(seen.filter((e) => e.type === 'text').length >= 2, 'text before the drop was delivered');
  t.false(seen.some((e) => e.type === 'done'));
});

test('a stream that stalls mid-answer, aborted by its signal (the LLM processor\'s silence bound, LLM_DEFAULTS.streamIdleMs), throws an abort error after the text it sent and closes the connection', async (t) => {
  const fake = await startOpenAIFake({ replies: [{ text: 'this answer stops halfway because the server goes quiet' }] });
  t.teardown(() => fake.close());
  fake.setFaults({ stallAfterChunks: 4 });
  const seen: LLMEvent[] = [];
  const abort = new AbortController();
  const err = await t.throwsAsync(async () => {
    for await (const e of service(fake).stream({ messages: [{ role: 'user', content: 'go' }], signal: abort.signal })) {
      seen.push(e);
      // The stall: the fake sends nothing more after its fourth chunk. What the processor does
      // after its bound, done here once the text before the stall is in.
      if (seen.filter((x) => x.type === 'text').length === 2) setTimeout(() => abort.abort(), 100);
    }
  });
  t.true(isAbortError(err), `an abort error, not ${String(err)}`);
  t.true(seen.filter((e) => e.type === 'text').length >= 2, 'text before the stall was delivered');
  t.false(seen.some((e) => e.type === 'done'));
  await until(() => fake.clientAborts >= 1, { timeoutMs: 5_000, intervalMs: 10, what: 'the stalled stream to be closed' });
});

test('a 500 before streaming is retried by the SDK', async (t) => {
  const fake = await startOpenAIFake({ replies: [{ text: 'recovered' }] });
  t.teardown(() => fake.close());
  fake.failNext(1, 500);
  const events = await collect(service(fake).stream({ messages: [{ role: 'user', content: 'hi' }] }));
  t.is(fake.requests.length, 2);
  t.deepEqual(events.filter((e) => e.type === 'text').map((e) => (e as { text: string }).text), ['recovered']);
});

test('the plugin registers llm:openai and reads OPENAI_API_KEY / OPENAI_BASE_URL', async (t) => {
  const fake = await startOpenAIFake({ replies: [{ text: 'from env' }] });
  t.teardown(() => fake.close());
  const registry = new Registry().use(openaiPlugin);
  t.deepEqual(registry.slugs('llm'), ['openai']);
  const fromRegistry = registry.create<OpenAILLMService>('llm', 'openai', { apiKey: fake.apiKey, baseUrl: fake.baseURL, model: 'm1' });
  t.is(fromRegistry.model, 'm1');

  const fromEnv = new OpenAILLMService({}, { OPENAI_API_KEY: fake.apiKey, OPENAI_BASE_URL: fake.baseURL });
  t.is(fromEnv.baseUrl, fake.baseURL);
  const events = await collect(fromEnv.stream({ messages: [{ role: 'user', content: 'hi' }] }));
  t.is(events.filter((e) => e.type === 'text').map((e) => (e as { text: string }).text).join(''), 'from env');
  t.throws(() => new OpenAILLMService({}, {}), { instanceOf: OpenAILLMError, message: /OPENAI_API_KEY/ });
});

test('the fake holds the first token back for firstTokenDelayMs on its clock', async (t) => {
  const clock = new VirtualClock();
  const fake = await startOpenAIFake({ clock, firstTokenDelayMs: 300, replies: [{ text: 'late hello' }] });
  t.teardown(() => fake.close());
  const events: LLMEvent[] = [];
  const done = (async () => {
    for await (const e of service(fake).stream({ messages: [{ role: 'user', content: 'hi' }] })) events.push(e);
  })();
  await holdsWithin(() => fake.requests.length > 0, { timeoutMs: 1000, intervalMs: 5 });
  await clock.advance(299);
  await new Promise((r) => setTimeout(r, 50));
  t.is(events.length, 0, 'nothing before the configured latency');
  await clock.advance(1);
  await done;
  t.is(events.filter((e) => e.type === 'text').map((e) => (e as { text: string }).text).join(''), 'late hello');
  t.is(fake.requests[0]!.firstChunkAtMs! - fake.requests[0]!.receivedAtMs, 300);
});

test('an unparseable SSE chunk fails with invalid_response instead of crashing', async (t) => {
  const fake = await startOpenAIFake({ malformedChunkAt: 2, replies: [{ text: 'one two three four' }] });
  t.teardown(() => fake.close());
  const err = await t.throwsAsync(collect(service(fake).stream({ messages: [{ role: 'user', content: 'go' }] })), { instanceOf: OpenAILLMError });
  t.is(err!.code, 'invalid_response');
});
