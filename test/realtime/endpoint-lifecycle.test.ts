/**
 * /realtime behaviour that needs control over timing: a resolver that answers when the test
 * says so (the endpoint takes any RealtimeResolver; the database-backed one is tested in
 * endpoint.test.ts), with the real face plugin behind it.
 */
import test from 'ava';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import WebSocket from 'ws';
import { Registry } from '../../core/registry.ts';
import { facePlugin } from '../../plugins/face/index.ts';
import { attachRealtime, type RealtimeEndpoint, type ResolvedFaceConfig } from '../../server/realtime/realtime-endpoint.ts';
import { encodeAudioIn } from '../../transports/realtime/protocol.ts';

let server: Server;
let endpoint: RealtimeEndpoint;
let url: string;
let release: (() => void) | undefined;

test.before(async () => {
  server = createServer();
  endpoint = attachRealtime(server, {
    registry: new Registry().use(facePlugin),
    resolver: {
      authenticate: async (key) => (key === 'good-key' ? { organizationId: 'org', principal: 'api_key:1' } : null),
      resolveConfig: async (_p, configId): Promise<ResolvedFaceConfig | null> => {
        if (configId !== 'held') return null;
        await new Promise<void>((resolve) => (release = resolve));
        return { configId, modelVariantId: 'svc/human-portrait/v1', faceSlug: 'human-portrait', configuration: { width: 256, height: 192 } };
      },
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `ws://127.0.0.1:${(server.address() as AddressInfo).port}/realtime`;
});

test.after.always(async () => {
  await endpoint.close();
  server.close();
});

test('audio and control sent before session_ready are refused with not_ready, and the session then works', async (t) => {
  const ws = new WebSocket(`${url}?config_id=held`, { headers: { 'x-api-key': 'good-key' } });
  t.teardown(() => ws.close());
  const messages: Array<Record<string, unknown>> = [];
  let frames = 0;
  ws.on('message', (data, binary) => (binary ? frames++ : messages.push(JSON.parse(data.toString()))));
  await new Promise((r) => ws.on('open', r));
  ws.send(encodeAudioIn(new Int16Array(640), 0));
  ws.send(JSON.stringify({ type: 'start_turn' }));
  for (let i = 0; i < 50 && messages.length < 2; i++) await new Promise((r) => setTimeout(r, 20));
  t.deepEqual(messages.map((m) => [m.type, m.code, m.fatal]), [
    ['error', 'not_ready', false],
    ['error', 'not_ready', false],
  ]);
  release!();
  for (let i = 0; i < 200 && frames < 3; i++) await new Promise((r) => setTimeout(r, 20));
  t.truthy(messages.find((m) => m.type === 'session_ready'));
  t.true(frames >= 3);
});
