/**
 * https webhooks reached through a pinned address: the TLS handshake must still name and verify
 * the host from the URL (SNI + certificate check), never the IP the connection really goes to.
 */
import test from 'ava';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WebhookClient, type WebhookRequest } from '../../processors/tools/webhook-client.ts';
import type { HostResolver } from '../../processors/tools/webhook-target.ts';

const HOST = 'hooks.invalid';

function selfSignedCertificate(): { key: string; cert: string } {
  const dir = mkdtempSync(join(tmpdir(), 'webhook-tls-'));
  try {
    execFileSync('openssl', [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'), '-days', '1',
      '-subj', `/CN=${HOST}`, '-addext', `subjectAltName=DNS:${HOST}`,
    ], { stdio: 'ignore' });
    return { key: readFileSync(join(dir, 'key.pem'), 'utf8'), cert: readFileSync(join(dir, 'cert.pem'), 'utf8') };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const request: WebhookRequest = {
  name: 'lookup',
  toolCallId: 'c1',
  arguments: '{}',
  responseRequired: true,
  metadata: { session_id: 's', agent_id: 'a', call_id: 'c', client_user_ref: null },
};

const toLoopback: HostResolver = async () => [{ address: '127.0.0.1', family: 4 }];

test('an https webhook on a pinned address is verified against the host name in its URL', async (t) => {
  const { key, cert } = selfSignedCertificate();
  const servernames: (string | undefined)[] = [];
  const server = https.createServer({ key, cert }, (_req, res) => {
    res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ result: 'over tls' }));
  });
  server.on('secureConnection', (socket) => servernames.push((socket as unknown as { servername?: string }).servername));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }));
  const { port } = server.address() as AddressInfo;

  const trusting = new WebhookClient({ allowedRanges: ['127.0.0.1/32'], resolver: toLoopback, extraCaCertificates: [cert] });
  const ok = await trusting.send(await trusting.resolve(`https://${HOST}:${port}/hook`), request);
  t.deepEqual(ok, { ok: true, status: 200, result: 'over tls' });
  t.deepEqual(servernames, [HOST], 'SNI carried the name from the URL');

  // Same address, another name: the certificate does not match, so the call fails.
  const wrongName = await trusting.send(await trusting.resolve(`https://other.invalid:${port}/hook`), request);
  t.like(wrongName, { ok: false, code: 'network' });
  t.regex(!wrongName.ok ? wrongName.error : '', /ERR_TLS_CERT_ALTNAME_INVALID/);

  // Same URL without the operator's CA: the certificate is not trusted.
  const untrusting = new WebhookClient({ allowedRanges: ['127.0.0.1/32'], resolver: toLoopback });
  const untrusted = await untrusting.send(await untrusting.resolve(`https://${HOST}:${port}/hook`), request);
  t.like(untrusted, { ok: false, code: 'network' });
  t.regex(!untrusted.ok ? untrusted.error : '', /SELF_SIGNED|UNABLE_TO_VERIFY/);
});
