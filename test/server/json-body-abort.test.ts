/**
 * A client that hangs up mid-body before the route starts reading it (the route waited for a key
 * lookup, slow under load) is an aborted request at once: readJsonBody does not wait for a 'close'
 * that was emitted already (the request was held forever, never answered nor logged).
 */
import test from 'ava';
import { createServer } from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import Koa from 'koa';
import { readJsonBody } from '../../server/http/json-body.ts';

test('a body whose client hung up before the read started rejects as an abort', async (t) => {
  let outcome: Promise<unknown> | undefined;
  const app = new Koa();
  app.use(async (ctx) => {
    await new Promise((resolve) => setTimeout(resolve, 300)); // the client is gone by then
    outcome = readJsonBody(ctx, 1 << 20);
    await outcome.catch(() => undefined);
  });
  const server = createServer(app.callback());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => {
    const socket = net.connect(port, '127.0.0.1', () => {
      socket.write('PATCH /x HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{"title": "cut', () => setTimeout(() => socket.destroy(), 50));
    });
    socket.on('error', () => undefined);
    socket.on('close', () => resolve());
  });
  const until = Date.now() + 3000;
  while (!outcome && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 20));
  t.truthy(outcome, 'the route read the body');
  const err = await Promise.race([outcome!.then(() => 'resolved', (e: { code?: string }) => e.code), new Promise((resolve) => setTimeout(() => resolve('still waiting'), 2000))]);
  t.is(err, 'ECONNRESET');
});
