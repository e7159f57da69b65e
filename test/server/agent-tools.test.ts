import test from 'ava';
import { startTestServer, type TestServer } from './harness.ts';

let s: TestServer;
test.before(async () => {
  s = await startTestServer({ label: 'tools' });
});
test.after.always(async () => {
  await s?.stop();
});

const webhook = (name: string, extra: Record<string, unknown> = {}) => ({
  type: 'function',
  function: { name, description: `does ${name}`, parameters: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] } },
  delivery: { mode: 'webhook', url: 'https://hooks.example.com/tool', wait_for_response: true },
  ...extra,
});
const client = (name: string) => ({ function: { name }, delivery: { mode: 'client' } });

const agent = async () => (await s.call('POST', '/v1/agents', { body: { title: 'tools' } })).body;
const setTools = (id: string, tools: unknown) => s.call('PATCH', `/v1/agents/${id}`, { body: { tools } });

test('tools get server-assigned tool_ids and are returned on reads in order', async (t) => {
  const a = await agent();
  const res = await setTools(a.agent_id, [webhook('lookup'), client('show_map')]);
  t.is(res.status, 200);
  t.is(res.body.tools.length, 2);
  t.regex(res.body.tools[0].tool_id, /^[0-9a-f-]{36}$/);
  t.deepEqual(res.body.tools.map((x: any) => x.function.name), ['lookup', 'show_map']);
  t.deepEqual(res.body.tools[0].delivery, { mode: 'webhook', url: 'https://hooks.example.com/tool', wait_for_response: true });
  t.deepEqual(res.body.tools[1].delivery, { mode: 'client' });
  t.true(res.body.tools[1].enabled, 'enabled defaults to true');
  t.is(res.body.tools[1].type, 'function');
  const read = await s.call('GET', `/v1/agents/${a.agent_id}`);
  t.deepEqual(read.body.tools, res.body.tools);
});

test('tools are a full replace matched by name: kept names keep their tool_id, absent ones are deleted', async (t) => {
  const a = await agent();
  const first = (await setTools(a.agent_id, [webhook('a'), webhook('b'), client('c')])).body.tools;
  const ids = Object.fromEntries(first.map((x: any) => [x.function.name, x.tool_id]));
  const second = (await setTools(a.agent_id, [{ ...client('c'), enabled: false }, webhook('d'), webhook('a', { function: { name: 'a', description: 'changed' } })])).body.tools;
  const byName = Object.fromEntries(second.map((x: any) => [x.function.name, x]));
  t.deepEqual(Object.keys(byName).sort(), ['a', 'c', 'd']);
  t.is(byName.a.tool_id, ids.a);
  t.is(byName.c.tool_id, ids.c);
  t.false(byName.c.enabled, 'disabled tool keeps its configuration');
  t.is(byName.a.function.description, 'changed');
  t.false(Object.values(ids).includes(byName.d.tool_id));
  t.is(await s.server.db('agent_tools').where('tool_id', ids.b).first(), undefined);
});

test('omitting tools leaves them untouched; an empty array deletes them all', async (t) => {
  const a = await agent();
  await setTools(a.agent_id, [client('keep')]);
  t.is((await s.call('PATCH', `/v1/agents/${a.agent_id}`, { body: { title: 'renamed' } })).body.tools.length, 1);
  t.deepEqual((await setTools(a.agent_id, [])).body.tools, []);
});

test('a tool_id sent back with a tool is ignored; matching is by name', async (t) => {
  const a = await agent();
  const [tool] = (await setTools(a.agent_id, [client('x')])).body.tools;
  const res = await setTools(a.agent_id, [{ ...client('x'), tool_id: '8f14e45f-ceea-467f-a9e3-7a1d7b9f0c11' }]);
  t.is(res.body.tools[0].tool_id, tool.tool_id);
});

test('parameters keep only properties and required; every other keyword is dropped', async (t) => {
  const a = await agent();
  const res = await setTools(a.agent_id, [{
    function: {
      name: 'p',
      parameters: {
        type: 'object', additionalProperties: false, description: 'top', $defs: { x: {} }, oneOf: [{}], anyOf: [{}], allOf: [{}],
        properties: { city: { type: 'string', description: 'kept as is' } }, required: ['city'],
      },
    },
    delivery: { mode: 'client' },
  }]);
  t.is(res.status, 200);
  t.deepEqual(res.body.tools[0].function.parameters, { properties: { city: { type: 'string', description: 'kept as is' } }, required: ['city'] });
  const none = await setTools(a.agent_id, [client('q')]);
  t.deepEqual(none.body.tools[0].function.parameters, { properties: {}, required: [] });
  t.is((await setTools(a.agent_id, [{ function: { name: 'r', parameters: { properties: [] } }, delivery: { mode: 'client' } }])).status, 400);
  t.is((await setTools(a.agent_id, [{ function: { name: 'r', parameters: { required: [1] } }, delivery: { mode: 'client' } }])).status, 400);
});

test('function.name: max 64, pattern [a-zA-Z0-9_-], unique, end_call reserved', async (t) => {
  const a = await agent();
  t.is((await setTools(a.agent_id, [client('n'.repeat(64))])).status, 200);
  t.is((await setTools(a.agent_id, [client('n'.repeat(65))])).status, 400);
  t.is((await setTools(a.agent_id, [client('Ok_name-1')])).status, 200);
  for (const bad of ['', 'has space', 'dot.name', 'ünï', 'semi;colon']) {
    t.is((await setTools(a.agent_id, [client(bad)])).status, 400, bad);
  }
  const dup = await setTools(a.agent_id, [client('same'), client('same')]);
  t.is(dup.status, 400);
  t.is(dup.body.details.issues[0].reason, 'duplicate_tool_name');
  const reserved = await setTools(a.agent_id, [client('end_call')]);
  t.is(reserved.status, 400);
  t.is(reserved.body.details.issues[0].reason, 'reserved_tool_name');
  t.deepEqual((await s.call('GET', `/v1/agents/${a.agent_id}`)).body.tools.map((x: any) => x.function.name), ['Ok_name-1'], 'rejected PATCHes change nothing');
});

test('function.description: max 1024', async (t) => {
  const a = await agent();
  t.is((await setTools(a.agent_id, [{ function: { name: 'd', description: 'x'.repeat(1024) }, delivery: { mode: 'client' } }])).status, 200);
  t.is((await setTools(a.agent_id, [{ function: { name: 'd', description: 'x'.repeat(1025) }, delivery: { mode: 'client' } }])).status, 400);
});

test('delivery: mode client|webhook; webhook needs a valid http(s) url up to 2048; client takes no url', async (t) => {
  const a = await agent();
  const url = (u: string) => [{ function: { name: 'w' }, delivery: { mode: 'webhook', url: u } }];
  t.is((await setTools(a.agent_id, url(`https://example.com/${'u'.repeat(2048 - 20)}`))).status, 200);
  t.is((await setTools(a.agent_id, url(`https://example.com/${'u'.repeat(2049 - 20)}`))).status, 400);
  t.is((await setTools(a.agent_id, url('http://example.com:8080/hook'))).status, 200);
  for (const bad of ['not a url', 'ftp://example.com/x', 'javascript:alert(1)', '']) {
    t.is((await setTools(a.agent_id, url(bad))).status, 400, bad);
  }
  t.is((await setTools(a.agent_id, [{ function: { name: 'w' }, delivery: { mode: 'webhook' } }])).status, 400);
  t.is((await setTools(a.agent_id, [{ function: { name: 'w' }, delivery: { mode: 'email' } }])).status, 400);
  t.is((await setTools(a.agent_id, [{ function: { name: 'w' }, delivery: { mode: 'client', url: 'https://x.example' } }])).status, 400);
  t.is((await setTools(a.agent_id, [{ function: { name: 'w' } }])).status, 400, 'no agent-wide default mode');
  const res = await setTools(a.agent_id, url('https://example.com/h'));
  t.false(res.body.tools[0].delivery.wait_for_response, 'wait_for_response defaults to false');
  t.is((await setTools(a.agent_id, [{ function: { name: 'w' }, delivery: { mode: 'webhook', url: 'https://e.com', wait_for_response: 'yes' } }])).status, 400);
});

test('type must be function', async (t) => {
  const a = await agent();
  t.is((await setTools(a.agent_id, [{ ...client('t'), type: 'retrieval' }])).status, 400);
});

test('tools can be saved on third_party agents too', async (t) => {
  const res = await s.call('POST', '/v1/agents', { body: { title: 'sts', mode: 'third_party', tools: [client('saved')] } });
  t.is(res.status, 201);
  t.is(res.body.tools[0].function.name, 'saved');
});
