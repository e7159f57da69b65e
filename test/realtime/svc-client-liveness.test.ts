/**
 * The TypeScript /realtime client notices a server it no longer hears (a NAT that forgot the
 * connection, a half-open socket) and a socket that dropped, and reports them as fatal errors;
 * the remote face built on it (the avatar processor's "remote" mode) then fails its frame stream
 * instead of ending it quietly. The server here is a bare WebSocket server playing /realtime.
 */
import test from 'ava';
import { WebSocketServer, type WebSocket } from 'ws';
import type { AddressInfo } from 'node:net';
import { RealClock, VirtualClock } from '../../core/clock.ts';
import { encodeFrameOut, REALTIME_LIMITS, type SessionReadyMessage } from '../../protocol/realtime.ts';
import { until } from '../../testing/until.ts';
import { openRemoteFaceSession } from '../../transports/realtime/remote-face-session.ts';
import { STV_DEFAULTS, SvcSTVClient } from '../../transports/realtime/stv-client.ts';
import { SvcClient, type RealtimeMessage } from '../../transports/realtime/svc-client.ts';

const READY: SessionReadyMessage = {
  type: 'session_ready', session_id: 's1', config_id: 'c1', model_variant_id: 'svc/human-portrait/v1', width: 4, height: 2, fps: 25,
  audio_in: { sample_rate: 16000, channels: 1, format: 's16le' },
  audio_out: { sample_rate: 16000, channels: 1, format: 's16le', samples_per_frame: 640 },
  video: { format: 'jpeg' }, limits: REALTIME_LIMITS, protocol_version: 1,
};

/** A server that says session_ready, then does what `after` says with the socket. */
async function server(t: { teardown(fn: () => void | Promise<void>): void }, after: (ws: WebSocket) => void): Promise<string> {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  await new Promise<void>((resolve) => wss.once('listening', () => resolve()));
  wss.on('connection', (ws) => {
    ws.send(JSON.stringify(READY));
    after(ws);
  });
  t.teardown(() => new Promise<void>((resolve) => {
    for (const c of wss.clients) c.terminate();
    wss.close(() => resolve());
  }));
  return `ws://127.0.0.1:${(wss.address() as AddressInfo).port}/realtime`;
}

function record(client: SvcClient): { messages: RealtimeMessage[]; done: Promise<void> } {
  const messages: RealtimeMessage[] = [];
  const done = new Promise<void>((resolve) => client.messages$.subscribe({ next: (m) => messages.push(m), complete: () => resolve() }));
  return { messages, done };
}

test('a server that goes silent (its pongs never come) is taken for lost after 2.5 keep-alive periods: a fatal error, then the end', async (t) => {
  // The server's socket stops reading and writing after session_ready (a half-open connection).
  const url = await server(t, (ws) => (ws as unknown as { _socket: { pause(): void } })._socket.pause());
  const client = new SvcClient({ apiKey: 'k', configId: 'c1', url, keepAliveMs: 100 });
  t.teardown(() => client.close());
  const seen = record(client);
  await client.connect();
  await seen.done;
  const errors = seen.messages.filter((m) => m.type === 'error');
  t.is(errors.length, 1);
  t.like(errors[0], { type: 'error', fatal: true });
  t.regex(errors[0]!.type === 'error' ? errors[0]!.message : '', /connection lost: nothing from the server for \d+ ms/);
  t.false(client.isConnected);
});

test('a server that answers its pings is kept', async (t) => {
  // The server lives in this process: a stall of the process is a stall of the server too, which
  // the client rightly takes for silence past its bound. Periods long against a loaded machine's
  // stalls (keep-alive 50 ms, a bound of 125 ms, failed once in a CI run under a CPU hog).
  const url = await server(t, (ws) => ws.on('message', (data) => {
    const m = JSON.parse(String(data));
    if (m.type === 'ping') ws.send(JSON.stringify({ type: 'pong', t: 0 }));
  }));
  const client = new SvcClient({ apiKey: 'k', configId: 'c1', url, keepAliveMs: 200 });
  t.teardown(() => client.close());
  const seen = record(client);
  await client.connect();
  // Ten keep-alive periods, four times the silence bound: answered pings keep it.
  await new Promise((resolve) => setTimeout(resolve, 2_000));
  t.true(seen.messages.filter((m) => m.type === 'pong').length >= 5, 'its pings were answered');
  t.true(client.isConnected);
  t.is(seen.messages.filter((m) => m.type === 'error').length, 0);
});

// Serial: its busy loop stalls this whole process, and the other tests' servers with it.
test.serial('a client stalled past its silence bound, with the server\'s answer waiting in its socket, is kept: the answer is read before the verdict', async (t) => {
  // The server answers a ping, then this process blocks for 6 keep-alive periods (a busy loop, as a
  // laptop that slept or a loaded machine would): when it runs again the client's timer comes
  // before the pong waiting in its socket is read. Judged at that timer, the connection was lost.
  let stalled = false;
  let pings = 0;
  const url = await server(t, (ws) => ws.on('message', (data) => {
    const m = JSON.parse(String(data));
    if (m.type !== 'ping') return;
    pings++;
    ws.send(JSON.stringify({ type: 'pong', t: 0 }));
    if (stalled) return;
    stalled = true;
    setImmediate(() => {
      const until = performance.now() + 300;
      while (performance.now() < until);
    });
  }));
  const client = new SvcClient({ apiKey: 'k', configId: 'c1', url, keepAliveMs: 50 });
  t.teardown(() => client.close());
  const seen = record(client);
  await client.connect();
  // The client's next ping comes from the first keep-alive tick after the stall that found the
  // server heard: the verdict is passed.
  await until(() => stalled && pings >= 2, { timeoutMs: 5_000, what: 'a ping after the stall' });
  t.deepEqual(seen.messages.filter((m) => m.type === 'error'), []);
  t.true(client.isConnected);
});

test('a dropped socket (1006) is a fatal error before the end; a server that says why it closes is reported once', async (t) => {
  const dropped = await server(t, (ws) => setTimeout(() => ws.terminate(), 20));
  const a = new SvcClient({ apiKey: 'k', configId: 'c1', url: dropped, keepAliveMs: 60_000 });
  const seenA = record(a);
  await a.connect();
  await seenA.done;
  t.deepEqual(seenA.messages.filter((m) => m.type === 'error').map((m) => m.type === 'error' && m.fatal), [true]);

  const told = await server(t, (ws) => setTimeout(() => {
    ws.send(JSON.stringify({ type: 'error', code: 'idle_timeout', message: 'idle', fatal: true }));
    ws.close(4408, 'idle_timeout');
  }, 20));
  const b = new SvcClient({ apiKey: 'k', configId: 'c1', url: told, keepAliveMs: 60_000 });
  const seenB = record(b);
  await b.connect();
  await seenB.done;
  t.deepEqual(seenB.messages.filter((m) => m.type === 'error').map((m) => m.type === 'error' && m.code), ['idle_timeout']);
});

test("the remote face fails its frame stream when its connection is lost, ends it when asked or when the server ends the session; audio after the end is ignored", async (t) => {
  const lost = await server(t, (ws) => setTimeout(() => ws.terminate(), 20));
  const face = await openRemoteFaceSession({ apiKey: 'k', configId: 'c1', url: lost, keepAliveMs: 60_000 }, new RealClock());
  const failed = await new Promise<unknown>((resolve) => face.frames.subscribe({ error: resolve, complete: () => resolve('completed') }));
  t.true(failed instanceof Error, String(failed));
  t.regex((failed as Error).message, /remote face session was lost/);
  t.notThrows(() => face.pushAudio(new Int16Array(640)), 'audio after the end goes nowhere');

  const graceful = await server(t, (ws) => ws.on('message', (data, isBinary) => {
    if (!isBinary && JSON.parse(String(data)).type === 'end') {
      ws.send(JSON.stringify({ type: 'session_ended', reason: 'session ended' }));
      ws.close(1000, 'session ended');
    }
  }));
  const asked = await openRemoteFaceSession({ apiKey: 'k', configId: 'c1', url: graceful, keepAliveMs: 60_000 }, new RealClock());
  const outcome = new Promise<unknown>((resolve) => asked.frames.subscribe({ error: resolve, complete: () => resolve('completed') }));
  await asked.end();
  t.is(await outcome, 'completed');
});

test('a URL carrying a key under any name the server refuses is refused before anything is sent', async (t) => {
  let connections = 0;
  const url = await server(t, () => connections++);
  for (const name of ['api_key', 'access_token', 'X-API-Key', 'bearer']) {
    const client = new SvcClient({ apiKey: 'k', configId: 'c1', url: `${url}?${name}=secret` });
    await t.throwsAsync(client.connect(), { message: new RegExp(`never put an API key or token in the URL \\(query parameter ${name}\\)`) });
  }
  t.is(connections, 0);
});

test('SvcSTVClient: a cancel the server never confirms stops muting speech after STV_DEFAULTS.cancelConfirmMs (the server dropped it)', async (t) => {
  let serverSocket: WebSocket | undefined;
  const received: string[] = [];
  const url = await server(t, (ws) => {
    serverSocket = ws;
    ws.on('message', (data, isBinary) => received.push(isBinary ? 'audio' : JSON.parse(String(data)).type));
  });
  const clock = new VirtualClock();
  const client = new SvcSTVClient({ apiKey: 'k', configId: 'c1', url, keepAliveMs: 0, clock });
  t.teardown(() => client.close());
  await client.connect();
  const speech = (index: number, turnId: number) => encodeFrameOut({ type: index === 0 ? 'speech-start' : 'speech', final: false, index, ptsMs: index * 40, turnId, width: 4, height: 2, imageFormat: 'rgb', image: new Uint8Array(24), audio: new Int16Array(640).fill(1000) });
  client.say(new Int16Array(3200).fill(500), 16_000);
  t.true(client.interrupt(), 'a cancel went out');
  await until(async () => received.includes('cancel'), { timeoutMs: 10_000, intervalMs: 5, what: 'the cancel to reach the server' });
  // The server dropped it (its control message rate): no turn_cancelled ever comes.
  client.say(new Int16Array(3200).fill(700), 16_000);
  const sendFrames = async (from: number) => {
    for (let i = from; i < from + 3; i++) serverSocket!.send(speech(i, 2));
    serverSocket!.send(JSON.stringify({ type: 'pong', t: from })); // a marker: everything before it arrived
    await until(async () => seen.has(from), { timeoutMs: 10_000, intervalMs: 5, what: 'the frames to arrive' });
  };
  const seen = new Set<number>();
  client.client.messages$.subscribe((m) => m.type === 'pong' && seen.add(m.t));
  await sendFrames(0);
  t.is(client.bufferedFrames, 0, 'speech frames are held as those of the cancelled turn while the cancel may still be confirmed');
  await clock.advance(STV_DEFAULTS.cancelConfirmMs + 100);
  await sendFrames(3);
  t.true(client.bufferedFrames > 0, 'after the bound, speech plays again');
});
