/**
 * A real HTTP server on 127.0.0.1 for webhook tests: each test installs the handler it needs and
 * reads back what the server actually received.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ReceivedRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: string;
}

export type Handler = (req: ReceivedRequest, res: http.ServerResponse) => void;

export interface LocalWebhook {
  readonly port: number;
  readonly url: (path?: string) => string;
  readonly received: ReceivedRequest[];
  /** Resolves with the next request the server fully receives. */
  nextRequest(): Promise<ReceivedRequest>;
  close(): Promise<void>;
}

export async function startLocalWebhook(handler: Handler): Promise<LocalWebhook> {
  const received: ReceivedRequest[] = [];
  const waiters: ((r: ReceivedRequest) => void)[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const r: ReceivedRequest = {
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
      };
      received.push(r);
      waiters.shift()?.(r);
      handler(r, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    port,
    url: (path = '/hook') => `http://127.0.0.1:${port}${path}`,
    received,
    nextRequest: () => new Promise((resolve) => waiters.push(resolve)),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export function json(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}
