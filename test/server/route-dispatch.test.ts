/**
 * The routers' dispatch (server/http/route-dispatch.ts) answers as `router.routes()` does: the same
 * routers served both ways give the same status, body and parameters for paths that match one route,
 * several (stack order, fall-through on `next()`), none, the method or not, with another case,
 * trailing slashes, percent-encoding and `use` middleware; routes declared after the chain is built
 * are served.
 */
import test from 'ava';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import Router from '@koa/router';
import Koa from 'koa';
import { routerDispatch } from '../../server/http/route-dispatch.ts';

function routers() {
  const root = new Router();
  const v1 = new Router({ prefix: '/v1' });
  const seen = (name: string): Koa.Middleware => (ctx) => {
    ctx.body = { name, params: ctx.params, routerPath: (ctx as unknown as { routerPath: string }).routerPath };
  };
  root.get('/healthz', seen('health'));
  root.get('/', seen('root'));
  root.get('/widget/:version/avatar.js', seen('widget'));
  v1.get('/agents/providers', seen('providers'));
  v1.get('/agents/:agent_id', seen('agent'));
  v1.get('/agents', seen('agents'));
  v1.post('/agents', seen('create'));
  v1.get('/storage/:key{/*rest}', seen('storage'));
  v1.get('/x/:a', async (ctx, next) => {
    ctx.set('x-first', ctx.params.a!);
    await next();
  });
  v1.get('/x/:b', seen('second'));
  v1.get('/:anything/deep/:id', seen('pattern first'));
  return { root, v1 };
}

async function serve(t: import('ava').ExecutionContext, how: 'routes' | 'dispatch') {
  const { root, v1 } = routers();
  const app = new Koa();
  app.use(how === 'routes' ? root.routes() : routerDispatch(root));
  app.use(how === 'routes' ? v1.routes() : routerDispatch(v1));
  app.use((ctx) => {
    ctx.status = 404;
    ctx.body = { name: 'none' };
  });
  const server = createServer(app.callback());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return { base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, v1 };
}

const PATHS: Array<[string, string]> = [
  ['GET', '/healthz'], ['GET', '/'], ['GET', '/widget/1.2.3/avatar.js'], ['GET', '/widget/1.2.3/other.js'],
  ['GET', '/v1/agents/providers'], ['GET', '/v1/agents/abc'], ['GET', '/v1/agents'], ['GET', '/v1/agents/'], ['POST', '/v1/agents'],
  ['DELETE', '/v1/agents/abc'], ['GET', '/V1/Agents/ABC'], ['GET', '/v1/agents/a%20b'], ['GET', '/v1/agents/%E0%A4%A'],
  ['GET', '/v1/storage/k/a/b/c'], ['GET', '/v1/storage/k'], ['GET', '/v1/x/1'], ['GET', '/v1/zzz/deep/7'], ['GET', '/v1/agents/deep/7'],
  ['GET', '/v1'], ['GET', '/v1/'], ['GET', '/nothing/here'], ['HEAD', '/v1/agents/abc'], ['GET', '//v1/agents'],
];

test('the dispatch answers every path as router.routes() does', async (t) => {
  const reference = await serve(t, 'routes');
  const fast = await serve(t, 'dispatch');
  for (const [method, path] of PATHS) {
    const a = await fetch(reference.base + path, { method });
    const b = await fetch(fast.base + path, { method });
    t.is(b.status, a.status, `${method} ${path}`);
    t.is(b.headers.get('x-first'), a.headers.get('x-first'), `${method} ${path}`);
    t.deepEqual(await b.text(), await a.text(), `${method} ${path}`);
  }
});

test('routes declared after the chain is built are served', async (t) => {
  const fast = await serve(t, 'dispatch');
  t.is((await fetch(`${fast.base}/v1/later/1`)).status, 404);
  fast.v1.get('/later/:n', (ctx) => {
    ctx.body = { later: ctx.params.n };
  });
  const res = await fetch(`${fast.base}/v1/later/1`);
  t.deepEqual(await res.json(), { later: '1' });
});
