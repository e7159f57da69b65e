import test from 'ava';
import { WEBHOOK_DEFAULTS, WebhookClient, type WebhookRequest } from '../../processors/tools/webhook-client.ts';
import { WebhookRefusedError } from '../../processors/tools/webhook-target.ts';
import { json, startLocalWebhook, type Handler, type LocalWebhook } from './local-webhook.ts';

const LOOPBACK_OPEN = ['127.0.0.1/32'];

const request = (overrides: Partial<WebhookRequest> = {}): WebhookRequest => ({
  name: 'lookup_order',
  toolCallId: 'call_1',
  arguments: '{"order":"A-17"}',
  responseRequired: true,
  metadata: { session_id: 'sess-1', agent_id: 'agent-1', call_id: 'call-rec-1', client_user_ref: 'user-9' },
  ...overrides,
});

async function withServer(
  handler: Handler,
  run: (server: LocalWebhook) => Promise<void>,
): Promise<void> {
  const server = await startLocalWebhook(handler);
  try {
    await run(server);
  } finally {
    await server.close();
  }
}

async function call(server: LocalWebhook, options: ConstructorParameters<typeof WebhookClient>[0] = {}, req = request()) {
  const client = new WebhookClient({ allowedRanges: LOOPBACK_OPEN, ...options });
  const target = await client.resolve(server.url());
  return client.send(target, req);
}

test('posts the documented body with a JSON content type and no signature header', async (t) => {
  await withServer((_r, res) => json(res, 200, { result: 'ok' }), async (server) => {
    const outcome = await call(server);
    t.true(outcome.ok);
    const [got] = server.received;
    t.is(got!.method, 'POST');
    t.is(got!.path, '/hook');
    t.is(got!.headers['content-type'], 'application/json');
    t.deepEqual(Object.keys(got!.headers).filter((h) => /sign|hmac|secret|auth/i.test(h)), []);
    t.deepEqual(JSON.parse(got!.body), {
      tool_call_message: {
        name: 'lookup_order',
        parameters: '{"order":"A-17"}',
        tool_call_id: 'call_1',
        response_required: true,
        tool_type: 'function',
      },
      session_id: 'sess-1',
      agent_id: 'agent-1',
      call_id: 'call-rec-1',
      client_user_ref: 'user-9',
    });
  });
});

test('the result is the body\'s result key when present', async (t) => {
  await withServer((_r, res) => json(res, 200, { result: { status: 'shipped' }, debug: 'x' }), async (server) => {
    t.deepEqual(await call(server), { ok: true, status: 200, result: { status: 'shipped' } });
  });
});

test('the result is the whole JSON body when it has no result key', async (t) => {
  await withServer((_r, res) => json(res, 201, { status: 'shipped', eta: 'Monday' }), async (server) => {
    t.deepEqual(await call(server), { ok: true, status: 201, result: { status: 'shipped', eta: 'Monday' } });
  });
  await withServer((_r, res) => json(res, 200, ['a', 'b']), async (server) => {
    t.deepEqual(await call(server), { ok: true, status: 200, result: ['a', 'b'] });
  });
});

test('a 204 answer is an empty result', async (t) => {
  await withServer((_r, res) => res.writeHead(204).end(), async (server) => {
    t.deepEqual(await call(server), { ok: true, status: 204, result: '' });
  });
});

test('an empty 200 body is an empty result', async (t) => {
  await withServer((_r, res) => res.writeHead(200, { 'Content-Type': 'application/json' }).end(), async (server) => {
    t.deepEqual(await call(server), { ok: true, status: 200, result: '' });
  });
});

test('a non-JSON body is an error result', async (t) => {
  await withServer((_r, res) => res.writeHead(200, { 'Content-Type': 'text/html' }).end('<h1>hi</h1>'), async (server) => {
    const outcome = await call(server);
    t.false(outcome.ok);
    t.is(!outcome.ok && outcome.code, 'unparseable');
  });
});

test('a non-2xx status is an error result', async (t) => {
  await withServer((_r, res) => json(res, 500, { result: 'should not be used' }), async (server) => {
    const outcome = await call(server);
    t.like(outcome, { ok: false, code: 'http_status', status: 500 });
  });
});

test('a redirect is not followed and is an error result', async (t) => {
  await withServer((_r, res) => json(res, 200, { result: 'secret from the redirect target' }), async (target) => {
    await withServer(
      (_r, res) => res.writeHead(302, { Location: target.url('/elsewhere') }).end(),
      async (server) => {
        const outcome = await call(server);
        t.like(outcome, { ok: false, code: 'redirect', status: 302 });
        t.is(target.received.length, 0, 'the redirect target was never called');
      },
    );
  });
});

test('a webhook slower than the timeout is an error result', async (t) => {
  await withServer((_r, res) => setTimeout(() => json(res, 200, { result: 'late' }), 5_000).unref(), async (server) => {
    const outcome = await call(server, { timeoutMs: 150 });
    t.like(outcome, { ok: false, code: 'timeout' });
  });
});

test('a huge streamed body is cut off at the size limit and is an error result', async (t) => {
  let written = 0;
  await withServer(
    (_r, res) => {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      const chunk = Buffer.alloc(64 * 1024, 0x20);
      // Up to 64 MB without Content-Length; the client must stop reading long before that.
      const pump = () => {
        while (written < 64 * 1024 * 1024) {
          written += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
        res.end();
      };
      res.on('error', () => {});
      pump();
    },
    async (server) => {
      const outcome = await call(server, { maxResponseBytes: 256 * 1024 });
      t.like(outcome, { ok: false, code: 'too_large' });
      t.true(written < 64 * 1024 * 1024, 'the server was stopped before sending everything');
    },
  );
});

test('a declared Content-Length above the limit is refused before reading', async (t) => {
  await withServer((_r, res) => json(res, 200, { result: 'x'.repeat(10_000) }), async (server) => {
    const outcome = await call(server, { maxResponseBytes: 1_000 });
    t.like(outcome, { ok: false, code: 'too_large' });
  });
});

test('fire-and-forget tells the receiver no response is required and ignores the answer', async (t) => {
  await withServer((_r, res) => res.writeHead(200).end('not even json'), async (server) => {
    const outcome = await call(server, {}, request({ responseRequired: false }));
    t.deepEqual(outcome, { ok: true, status: 200, result: null });
    t.false(JSON.parse(server.received[0]!.body).tool_call_message.response_required);
  });
});

test('DNS pinning: connects to the checked address without a second lookup, so rebinding cannot switch it, and keeps the Host header', async (t) => {
  await withServer((_r, res) => json(res, 200, { result: 'pinned' }), async (server) => {
    let lookups = 0;
    // `hooks.invalid` exists in no DNS: if the HTTP client looked it up itself, the call would fail.
    const client = new WebhookClient({
      allowedRanges: LOOPBACK_OPEN,
      resolver: async () => {
        lookups++;
        return [{ address: '127.0.0.1', family: 4 }];
      },
    });
    const target = await client.resolve(`http://hooks.invalid:${server.port}/hook`);
    const outcome = await client.send(target, request());
    t.deepEqual(outcome, { ok: true, status: 200, result: 'pinned' });
    t.is(lookups, 1);
    t.is(server.received[0]!.headers.host, `hooks.invalid:${server.port}`);
  });
});

test('operator allow-list: off by default, the same loopback URL is refused without it and reached with it', async (t) => {
  await withServer((_r, res) => json(res, 200, { result: 42 }), async (server) => {
    const closed = new WebhookClient();
    t.deepEqual(WEBHOOK_DEFAULTS.allowedRanges, [], 'nothing is opened by default');
    const err = await t.throwsAsync(closed.resolve(server.url()), { instanceOf: WebhookRefusedError });
    t.is(err!.code, 'forbidden_address');

    const open = new WebhookClient({ allowedRanges: LOOPBACK_OPEN });
    t.deepEqual(await open.send(await open.resolve(server.url()), request()), { ok: true, status: 200, result: 42 });
    t.is(server.received.length, 1, 'only the allowed client reached the server');
  });
});

test('an aborted call resolves as aborted', async (t) => {
  await withServer((_r, res) => setTimeout(() => json(res, 200, {}), 5_000).unref(), async (server) => {
    const client = new WebhookClient({ allowedRanges: LOOPBACK_OPEN });
    const controller = new AbortController();
    const pending = client.send(await client.resolve(server.url()), request(), controller.signal);
    await server.nextRequest();
    controller.abort();
    t.like(await pending, { ok: false, code: 'aborted' });
  });
});

test('a refused connection is an error result, not a throw', async (t) => {
  const server = await startLocalWebhook(() => {});
  const url = server.url();
  await server.close();
  const client = new WebhookClient({ allowedRanges: LOOPBACK_OPEN });
  t.like(await client.send(await client.resolve(url), request()), { ok: false, code: 'network' });
});

test('credentials in the URL are sent as Basic authentication; undecodable ones are an error result', async (t) => {
  await withServer((_r, res) => json(res, 200, { result: 'ok' }), async (server) => {
    const client = new WebhookClient({ allowedRanges: LOOPBACK_OPEN });
    const withAuth = await client.resolve(`http://bot:s%3Acret@127.0.0.1:${server.port}/hook`);
    t.like(await client.send(withAuth, request()), { ok: true });
    t.is(server.received[0]!.headers.authorization, `Basic ${Buffer.from('bot:s:cret').toString('base64')}`);

    const broken = await client.resolve(`http://%zz@127.0.0.1:${server.port}/hook`);
    t.like(await client.send(broken, request()), { ok: false, code: 'network' });
    t.is(server.received.length, 1);
  });
});

test('an IPv6 loopback webhook works when its range is opened, with a bracketed Host header', async (t) => {
  const http = await import('node:http');
  const server = http.createServer((req, res) => json(res, 200, { result: req.headers.host }));
  await new Promise<void>((resolve) => server.listen(0, '::1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const { port } = server.address() as import('node:net').AddressInfo;
  const url = `http://[::1]:${port}/hook`;
  await t.throwsAsync(new WebhookClient({ allowedRanges: LOOPBACK_OPEN }).resolve(url), { instanceOf: WebhookRefusedError });
  const client = new WebhookClient({ allowedRanges: ['::1/128'] });
  t.deepEqual(await client.send(await client.resolve(url), request()), { ok: true, status: 200, result: `[::1]:${port}` });
});

test('a host whose DNS lookup hangs is refused as unresolvable after the resolve timeout', async (t) => {
  const client = new WebhookClient({ resolver: () => new Promise(() => {}), resolveTimeoutMs: 50 });
  const err = await t.throwsAsync(client.resolve('http://slow-dns.invalid/hook'), { instanceOf: WebhookRefusedError });
  t.is(err!.code, 'unresolvable_host');
  t.regex(err!.message, /ETIMEOUT/);
});
