/**
 * A site owner's page on another origin, embedding the widget as the README shows:
 * `/page?agent=ID&api=BASE` with optional `extra` (attributes for the element), `bg` (page
 * background) and `two` (a second widget on the page); `/preview.png`, an agent preview image;
 * `/preview.webm`, an agent preview that is a video (2 s, 320x240, VP8: Debian's chromium has
 * no H.264), made by ffmpeg on first request.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { AddressInfo } from 'node:net';
import sharp from 'sharp';

export interface CustomerSite {
  readonly url: string;
  /** The page's address for an agent on the API at `api`, with the query parameters above. */
  page(agentId: string, api: string, params?: Record<string, string>): string;
  close(): Promise<void>;
}

export async function startCustomerSite(): Promise<CustomerSite> {
  const png = await sharp({ create: { width: 320, height: 240, channels: 3, background: { r: 40, g: 120, b: 200 } } }).png().toBuffer();
  let webm: Promise<Buffer> | undefined;
  const makeWebm = async (): Promise<Buffer> => {
    const dir = await mkdtemp(join(tmpdir(), 'svc-site-'));
    try {
      const file = join(dir, 'preview.webm');
      await promisify(execFile)('ffmpeg', ['-v', 'error', '-f', 'lavfi', '-i', 'testsrc=size=320x240:rate=25:duration=2', '-c:v', 'libvpx', '-b:v', '300k', '-an', '-y', file]);
      return await readFile(file);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  };
  const http: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    if (url.pathname === '/preview.png') return void res.writeHead(200, { 'Content-Type': 'image/png' }).end(png);
    if (url.pathname === '/preview.webm') {
      webm ??= makeWebm();
      return void webm.then(
        (bytes) => res.writeHead(200, { 'Content-Type': 'video/webm', 'Content-Length': String(bytes.length) }).end(bytes),
        (err: Error) => res.writeHead(500).end(err.message),
      );
    }
    if (url.pathname === '/page') {
      const agent = url.searchParams.get('agent')!;
      const api = url.searchParams.get('api')!;
      const extra = url.searchParams.get('extra') ?? '';
      const bg = url.searchParams.get('bg') ?? '#ffffff';
      res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
      res.end(`<!doctype html><html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<script src="${api}/widget/latest/svc-agent.js"></script></head><body style="background:${bg};margin:16px">
<svc-agent id="one" agent-id="${agent}" core-api-endpoint="${api}" ${extra}></svc-agent>
${url.searchParams.get('two') ? `<svc-agent id="two" agent-id="${agent}" core-api-endpoint="${api}"></svc-agent>` : ''}
</body></html>`);
      return;
    }
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
  return {
    url,
    page: (agentId, api, params = {}) => `${url}/page?${new URLSearchParams({ agent: agentId, api, ...params })}`,
    close: () => new Promise<void>((resolve) => {
      http.closeAllConnections();
      http.close(() => resolve());
    }),
  };
}
