/**
 * /realtime behaviour that needs control over timing, on the real server: the database-backed
 * resolver, wrapped so that config resolution answers when the test says so (every answer still
 * comes from PostgreSQL), with the real face plugin behind it.
 */
import test from 'ava';
import { facePlugin } from '../../plugins/face/index.ts';
import { attachRealtime, createRealtimeResolver, type RealtimeEndpoint, type RealtimeResolver } from '../../server/realtime/index.ts';
import { encodeAudioIn } from '../../protocol/realtime.ts';
import { startTestServer, type TestServer } from '../server/harness.ts';
import { connectRaw, isReady } from './ws-conn.ts';

let ts: TestServer;
let endpoint: RealtimeEndpoint;
let release: (() => void) | undefined;
const held = new Promise<void>((resolve) => (release = resolve));

test.before(async () => {
  ts = await startTestServer({ label: 'realtime_lifecycle', plugins: [facePlugin] });
  const real = createRealtimeResolver(ts.server);
  const gated: RealtimeResolver = {
    authenticate: (key) => real.authenticate(key),
    resolveConfig: async (principal, configId) => {
      await held;
      return real.resolveConfig(principal, configId);
    },
  };
  endpoint = attachRealtime(ts.server.httpServer, { registry: ts.server.registry, resolver: gated });
});

test.after.always(async () => {
  await endpoint?.close();
  await ts?.stop();
});

test('audio and control sent before session_ready are refused with not_ready, and the session then works', async (t) => {
  const c = connectRaw(`${ts.url.replace(/^http/, 'ws')}/realtime?config_id=svc/human-portrait`, { 'x-api-key': ts.keyA });
  t.teardown(() => c.ws.close());
  await new Promise((r) => c.ws.on('open', r));
  c.ws.send(encodeAudioIn(new Int16Array(640), 0));
  c.ws.send(JSON.stringify({ type: 'start_turn' }));
  await c.next(() => c.messages.length >= 2);
  t.deepEqual(c.messages.map((m) => (m.type === 'error' ? [m.type, m.code, m.fatal] : [m.type])), [
    ['error', 'not_ready', false],
    ['error', 'not_ready', false],
  ]);
  release!();
  await c.next(isReady);
  await c.framesUntil((f) => f.index >= 2);
  t.pass();
});
