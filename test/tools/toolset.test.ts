import test from 'ava';
import { END_CALL_DEFINITION, END_CALL_TOOL, toolDefinition, type AgentTool } from '../../processors/tools/agent-tool.ts';
import { prepareToolset } from '../../processors/tools/toolset.ts';
import { WebhookClient } from '../../processors/tools/webhook-client.ts';
import { captureLogger } from './dispatcher-driver.ts';

const weather: AgentTool = {
  enabled: true,
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather for a city',
    parameters: {
      type: 'object',
      description: 'dropped',
      additionalProperties: false,
      $defs: { unit: { enum: ['c', 'f'] } },
      oneOf: [{ required: ['city'] }],
      anyOf: [],
      allOf: [],
      properties: { city: { type: 'string', description: 'City name' }, unit: { $ref: '#/$defs/unit' } },
      required: ['city'],
    },
  },
  delivery: { mode: 'client' },
};

const webhookTool = (name: string, url: string, enabled = true): AgentTool => ({
  enabled,
  function: { name, description: `${name} via webhook` },
  delivery: { mode: 'webhook', url, wait_for_response: true },
});

test('tool definitions keep only name, description, properties and required', (t) => {
  t.deepEqual(toolDefinition(weather), {
    name: 'get_weather',
    description: 'Weather for a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', description: 'City name' }, unit: { $ref: '#/$defs/unit' } },
      required: ['city'],
    },
  });
});

test('a tool without parameters gets an empty object schema', (t) => {
  t.deepEqual(toolDefinition({ function: { name: 'ping' }, delivery: { mode: 'client' } }), {
    name: 'ping',
    parameters: { type: 'object', properties: {} },
  });
});

test('disabled tools are hidden from the model', async (t) => {
  const set = await prepareToolset(
    [weather, { ...weather, enabled: false, function: { ...weather.function, name: 'secret_tool' } }],
    { mode: 'svc', webhooks: new WebhookClient(), logger: captureLogger() },
  );
  t.false(set.definitions.some((d) => d.name === 'secret_tool'));
  t.true(set.definitions.some((d) => d.name === 'get_weather'), 'the enabled copy is offered');
  t.false(set.tools.has('secret_tool'), 'and a call to it is not dispatched');
  t.deepEqual(set.dropped, [], 'disabled is hidden, not dropped');
});

test('end_call is the built-in hang-up tool, offered to every svc agent', async (t) => {
  const none = await prepareToolset([], { mode: 'svc', webhooks: new WebhookClient(), logger: captureLogger() });
  t.deepEqual(none.definitions, [END_CALL_DEFINITION]);
  t.deepEqual(none.tools.get(END_CALL_TOOL)?.delivery, { mode: 'end_call' });
  const some = await prepareToolset([weather], { mode: 'svc', webhooks: new WebhookClient(), logger: captureLogger() });
  t.deepEqual(some.definitions.map((d) => d.name), ['get_weather', END_CALL_TOOL]);
  const off = await prepareToolset([weather], { mode: 'svc', webhooks: new WebhookClient(), logger: captureLogger(), endCall: false });
  t.deepEqual(off.definitions.map((d) => d.name), ['get_weather'], 'a framework bot may opt out');
});

test('user tools may not be named end_call: such a tool is dropped with a logged reason and the built-in one stays', async (t) => {
  const logger = captureLogger();
  const set = await prepareToolset([{ function: { name: END_CALL_TOOL, description: 'mine' }, delivery: { mode: 'client' } }], {
    mode: 'svc',
    webhooks: new WebhookClient(),
    logger,
  });
  t.deepEqual(set.dropped.map((d) => d.code), ['reserved_name']);
  t.is(set.tools.get(END_CALL_TOOL)?.delivery.mode, 'end_call');
  t.not(set.definitions.find((d) => d.name === END_CALL_TOOL)?.description, 'mine');
  t.is(logger.entries.filter((e) => e.level === 'warn').length, 1);
});

test('a webhook tool whose URL the SSRF guard refuses is dropped for the session with a logged reason', async (t) => {
  const logger = captureLogger();
  const set = await prepareToolset(
    [webhookTool('internal', 'http://127.0.0.1:9/hook'), webhookTool('metadata', 'http://169.254.169.254/'), weather],
    { mode: 'svc', webhooks: new WebhookClient(), logger },
  );
  t.deepEqual(set.definitions.map((d) => d.name), ['get_weather', END_CALL_TOOL]);
  t.deepEqual(set.dropped.map((d) => [d.name, d.code]), [
    ['internal', 'webhook_refused'],
    ['metadata', 'webhook_refused'],
  ]);
  const warnings = logger.entries.filter((e) => e.level === 'warn');
  t.is(warnings.length, 2);
  t.regex(warnings[0]!.message, /internal dropped/);
  t.regex(String(warnings[0]!.fields['reason']), /loopback/);
  t.regex(String(warnings[1]!.fields['reason']), /link-local/);
});

test('the same loopback webhook is kept when the operator opens its range', async (t) => {
  const set = await prepareToolset([webhookTool('internal', 'http://127.0.0.1:9/hook')], {
    mode: 'svc',
    webhooks: new WebhookClient({ allowedRanges: ['127.0.0.0/8'] }),
    logger: captureLogger(),
  });
  t.deepEqual(set.dropped, []);
  t.deepEqual(set.tools.get('internal')?.delivery, { mode: 'webhook', url: 'http://127.0.0.1:9/hook', waitForResponse: true });
});

test('a second tool with the same name is dropped', async (t) => {
  const set = await prepareToolset([weather, weather], { mode: 'svc', webhooks: new WebhookClient(), logger: captureLogger() });
  t.deepEqual(set.dropped.map((d) => d.code), ['duplicate_name']);
  t.deepEqual(set.definitions.map((d) => d.name), ['get_weather', END_CALL_TOOL]);
});

test('wait_for_response defaults to fire-and-forget', async (t) => {
  const set = await prepareToolset([{ function: { name: 'notify' }, delivery: { mode: 'webhook', url: 'http://127.0.0.1:9/' } }], {
    mode: 'svc',
    webhooks: new WebhookClient({ allowedRanges: ['127.0.0.1'] }),
    logger: captureLogger(),
  });
  t.deepEqual(set.tools.get('notify')?.delivery, { mode: 'webhook', url: 'http://127.0.0.1:9/', waitForResponse: false });
});

test('third_party agents offer no tools to any model', async (t) => {
  const set = await prepareToolset([weather, webhookTool('internal', 'http://127.0.0.1:9/hook')], {
    mode: 'third_party',
    webhooks: new WebhookClient(),
    logger: captureLogger(),
  });
  t.deepEqual(set.definitions, []);
  t.is(set.tools.size, 0);
});

test('a webhook host that does not resolve at session start is kept and checked again on each call', async (t) => {
  const logger = captureLogger();
  const resolver = async () => {
    throw Object.assign(new Error('ENOTFOUND'), { code: 'ENOTFOUND' });
  };
  const set = await prepareToolset([webhookTool('flaky', 'http://hooks.invalid/hook')], {
    mode: 'svc',
    webhooks: new WebhookClient({ resolver }),
    logger,
  });
  t.true(set.tools.has('flaky'));
  t.deepEqual(set.dropped, []);
  t.true(logger.entries.some((e) => e.level === 'warn' && e.fields['code'] === 'unresolvable_host'));
});
