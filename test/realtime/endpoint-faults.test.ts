/**
 * /realtime when things go wrong on the server side or the client goes quiet, on the real
 * server: a face model whose frame stream fails or whose session cannot open (registered through
 * the ordinary plugin API, delegating to the real human-portrait model), and the idle timeout.
 */
import test from 'ava';
import { map } from 'rxjs';
import type { Plugin } from '../../core/registry.ts';
import type { FaceModel } from '../../processors/avatar/face-model.ts';
import { facePlugin } from '../../plugins/face/index.ts';
import { attachRealtime, createRealtimeResolver, type RealtimeEndpoint } from '../../server/realtime/index.ts';
import { SvcClient } from '../../transports/realtime/svc-client.ts';
import { startTestServer, type TestServer } from '../server/harness.ts';
import { until } from '../../testing/until.ts';
import { connectRaw, delay, isError, isReady } from './ws-conn.ts';

/**
 * Faulty variants: `faulty-stream` errors after 5 frames, `faulty-open` throws when opened,
 * `faulty-slow` takes SLOW_OPEN_MS to open (a set-up slower than the idle timeout).
 */
const faultyPlugin: Plugin = {
  name: 'faulty-face',
  register(registry) {
    for (const kind of ['stream', 'open', 'slow'] as const) {
      const descriptor = {
        model_variant_id: `svc/faulty-${kind}/v1`, model_id: `svc/faulty-${kind}`, title: `Faulty ${kind}`, description: { en: 'test' },
        configuration_schema: { type: 'object' }, status: 'public', tags: ['test'], preview_media_url: null,
      };
      registry.register('face', `faulty-${kind}`, (): FaceModel => {
        const real = registry.create<FaceModel>('face', 'human-portrait', {});
        return {
          ...real,
          descriptor: { ...real.descriptor, ...descriptor } as FaceModel['descriptor'],
          validateConfiguration: (c) => real.validateConfiguration(c),
          prepareReference: (i, l) => real.prepareReference(i, l),
          openSource: (c) => real.openSource(c),
          async openSession(config, clock) {
            if (kind === 'open') throw new Error('renderer exploded');
            if (kind === 'slow') {
              await delay(SLOW_OPEN_MS);
              return real.openSession(config, clock);
            }
            const session = await real.openSession(config, clock);
            const frames = session.frames.pipe(
              map((f) => {
                if (f.index >= 5) throw new Error('renderer exploded mid-stream');
                return f;
              }),
            );
            return {
              frames, width: session.width, height: session.height, imageFormat: session.imageFormat, startedAtMs: session.startedAtMs,
              startTurn: (o) => session.startTurn(o), pushAudio: (p, o) => session.pushAudio(p, o), endTurn: () => session.endTurn(),
              cancel: () => session.cancel(), end: () => session.end(), close: () => session.close(),
            };
          },
        };
      }, { label: descriptor.title, descriptor });
    }
  },
};

let ts: TestServer;
let endpoint: RealtimeEndpoint;
let idle: RealtimeEndpoint;
const configs: Record<string, string> = {};
const IDLE_MS = 1500; // generous: pings every 500 ms must survive event-loop stalls on a loaded machine
const SLOW_OPEN_MS = 2 * IDLE_MS;
let setup: RealtimeEndpoint;
const SETUP_MS = 1000;

test.before(async () => {
  // Face sessions admitted by slots only: these tests open several at once, and a loaded test machine's
  // late frames would refuse one at random; the late-frame rule has its own tests (operations-overload).
  ts = await startTestServer({ label: 'realtime_faults', plugins: [facePlugin, faultyPlugin], config: { capacityLoadCheck: false }, surfaces: { realtime: true } });
  endpoint = ts.server.realtime!;
  idle = attachRealtime(ts.server.httpServer, { registry: ts.server.registry, resolver: createRealtimeResolver(ts.server), path: '/realtime-idle', idleTimeoutMs: IDLE_MS });
  setup = attachRealtime(ts.server.httpServer, { registry: ts.server.registry, resolver: createRealtimeResolver(ts.server), path: '/realtime-setup', setupTimeoutMs: SETUP_MS });
  for (const variant of ['svc/faulty-stream/v1', 'svc/faulty-open/v1', 'svc/faulty-slow/v1', 'svc/human-portrait/v1']) {
    const created = await ts.call('POST', '/v1/model-configs', { body: { title: variant, model_variant_id: variant, model_configurations: variant.includes('portrait') ? { width: 192, height: 128 } : {} } });
    if (created.status !== 201) throw new Error(`config creation failed: ${created.text}`);
    configs[variant] = created.body.model_config_id;
  }
});

test.after.always(async () => {
  await idle?.close();
  await setup?.close();
  await ts?.stop();
});

const open = (variant: string, path = '/realtime') => connectRaw(`${ts.url.replace(/^http/, 'ws')}${path}?config_id=${configs[variant]}`, { 'x-api-key': ts.keyA });

test('a face stream that fails mid-session is internal_error (1011) for that session only; the process and a bystander carry on', async (t) => {
  const bystander = open('svc/human-portrait/v1');
  t.teardown(() => bystander.ws.close());
  await bystander.next(isReady);
  const c = open('svc/faulty-stream/v1');
  await c.next(isReady);
  t.like(await c.next(isError('internal_error')), { fatal: true });
  t.is((await c.closed).code, 1011);
  t.is(c.frames.length, 5);
  const seen = bystander.frames.at(-1)?.index ?? 0;
  await bystander.framesUntil((f) => f.index >= seen + 5);
  t.pass();
});

test('a face session that cannot open is internal_error (1011); the next session opens normally', async (t) => {
  const c = open('svc/faulty-open/v1');
  t.like(await c.next(isError('internal_error')), { fatal: true });
  t.is((await c.closed).code, 1011);
  const after = open('svc/human-portrait/v1');
  t.teardown(() => after.ws.close());
  await after.next(isReady);
  t.pass();
});

test('idle timeout: a silent client is closed with idle_timeout (4408); session_ready announces the value', async (t) => {
  const c = open('svc/human-portrait/v1', '/realtime-idle');
  const ready = await c.next(isReady);
  t.is(ready.type === 'session_ready' ? ready.limits.idleTimeoutMs : 0, IDLE_MS);
  t.like(await c.next(isError('idle_timeout')), { fatal: true });
  t.is((await c.closed).code, 4408);
});

test('idle timeout: a set-up slower than the timeout (a face that takes twice the timeout to open) is not the client\'s silence: session_ready, then its full timeout', async (t) => {
  const c = open('svc/faulty-slow/v1', '/realtime-idle');
  t.teardown(() => c.ws.close());
  const connectedAt = Date.now();
  await c.next(isReady);
  const readyAt = Date.now();
  t.true(readyAt - connectedAt >= SLOW_OPEN_MS - 50, `ready after ${readyAt - connectedAt} ms`);
  t.deepEqual(c.messages.filter((m) => m.type === 'error'), [], 'not closed as idle while it was set up');
  // Silent from session_ready on: closed one timeout later, not before.
  t.like(await c.next(isError('idle_timeout')), { fatal: true });
  t.true(Date.now() - readyAt >= IDLE_MS - 50, `closed ${Date.now() - readyAt} ms after session_ready`);
});

test('a set-up that does not finish within setupTimeoutMs is internal_error (1011), and its capacity is given back', async (t) => {
  const c = open('svc/faulty-slow/v1', '/realtime-setup');
  t.teardown(() => c.ws.close());
  const connectedAt = Date.now();
  const err = await c.next(isError('internal_error'));
  t.like(err, { fatal: true });
  t.regex((err as { message: string }).message, /could not be set up within 1000 ms/);
  t.true(Date.now() - connectedAt >= SETUP_MS - 50);
  t.is((await c.closed).code, 1011);
  t.is(setup.activeSessions, 0, 'the connection left the live set');
  // The face opens later (it was slow, not dead): it is closed at once, nothing is left.
  await delay(SLOW_OPEN_MS);
  t.is(setup.activeSessions, 0);
});

test.serial('idle timeout: a ping already waiting in the socket when a stalled server wakes up keeps the session open', async (t) => {
  const c = open('svc/human-portrait/v1', '/realtime-idle');
  t.teardown(() => c.ws.close());
  await c.next(isReady);
  c.ws.send(JSON.stringify({ type: 'ping' }));
  await delay(IDLE_MS - 500);
  c.ws.send(JSON.stringify({ type: 'ping' })); // written to the server's socket now ...
  const stalledUntil = Date.now() + 900; // ... while this process (server included) is busy past the deadline
  while (Date.now() < stalledUntil);
  await delay(IDLE_MS / 2);
  t.is(c.ws.readyState, c.ws.OPEN);
  t.deepEqual(c.messages.filter((m) => m.type === 'error'), []);
});

test.serial('idle timeout: SvcClient keeps an idle session open with pings paced by the announced timeout', async (t) => {
  const client = new SvcClient({ apiKey: ts.keyA, configId: configs['svc/human-portrait/v1']!, url: `${ts.url.replace(/^http/, 'ws')}/realtime-idle` });
  t.teardown(() => client.close());
  const errors: string[] = [];
  client.messages$.subscribe((m) => void (m.type === 'error' && errors.push(m.code)));
  await client.connect();
  await delay(IDLE_MS * 3);
  t.true(client.isConnected);
  t.deepEqual(errors, []);
});

test.serial('shutdown while a connection is still authenticating (a slow key lookup): it is ended too, opens no session, and the close does not wait for its client', async (t) => {
  const real = createRealtimeResolver(ts.server);
  let letGo!: () => void;
  const held = new Promise<void>((resolve) => (letGo = resolve));
  let asked = false;
  const slow = attachRealtime(ts.server.httpServer, {
    registry: ts.server.registry,
    path: '/realtime-slow-auth',
    // The key lookup waits (a database slow to answer), then answers as the real one does.
    resolver: { ...real, authenticate: async (key: string) => { asked = true; await held; return real.authenticate(key); } } as typeof real,
  });
  const c = open('svc/human-portrait/v1', '/realtime-slow-auth');
  t.teardown(() => c.ws.terminate());
  await until(async () => asked, { timeoutMs: 30_000, intervalMs: 10, what: 'the key lookup to start' });
  const closed = slow.close();
  letGo();
  const outcome = await Promise.race([closed.then(() => 'closed'), delay(15_000).then(() => 'still waiting')]);
  t.is(outcome, 'closed', 'the endpoint closed without waiting for the client to leave');
  t.is((await c.closed).code, 1001);
  t.false(c.messages.some((m) => m.type === 'session_ready'), 'no session was opened');
  t.is(slow.activeSessions, 0);
});
