import net from 'node:net';

export interface RawExchange {
  /** Everything the server sent. */
  text: string;
  /** The server closed (or reset) the connection before `waitMs` ran out. */
  closed: boolean;
}

/**
 * Sends raw bytes on a fresh TCP connection and collects the answer until the server closes the
 * connection, or `waitMs` passes (a generous "does not hang forever" bound, not a timing goal).
 * `until` ends the exchange early once the collected text satisfies it; the socket is always
 * destroyed before returning.
 */
export function rawExchange(url: string, payload: string | Buffer | null, options: { waitMs?: number; until?: (text: string) => boolean } = {}): Promise<RawExchange> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = net.connect(Number(port), hostname);
    let text = '';
    let done = false;
    const finish = (closed: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({ text, closed });
    };
    const timer = setTimeout(() => finish(false), options.waitMs ?? 10_000);
    socket.on('data', (chunk) => {
      text += chunk.toString('latin1');
      if (options.until?.(text)) finish(false);
    });
    socket.on('error', () => finish(true));
    socket.on('close', () => finish(true));
    if (payload !== null) socket.on('connect', () => socket.write(payload));
  });
}

/** Status code and JSON body of the first HTTP response in `text` (Content-Length framed). */
export function firstResponse(text: string): { status: number; headers: Record<string, string>; body: any; rest: string } {
  const end = text.indexOf('\r\n\r\n');
  if (end < 0) throw new Error(`no complete response head in ${JSON.stringify(text.slice(0, 200))}`);
  const [statusLine, ...lines] = text.slice(0, end).split('\r\n');
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const i = line.indexOf(':');
    headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  const length = Number(headers['content-length'] ?? 0);
  const bodyText = Buffer.from(text.slice(end + 4), 'latin1').subarray(0, length).toString('utf8');
  let body: any;
  try {
    body = bodyText ? JSON.parse(bodyText) : undefined;
  } catch {
    body = undefined;
  }
  return { status: Number(statusLine!.split(' ')[1]), headers, body, rest: text.slice(end + 4 + length) };
}

/** Whether `text` holds `count` complete Content-Length framed responses. */
export function hasResponses(text: string, count: number): boolean {
  let rest = text;
  for (let i = 0; i < count; i++) {
    try {
      const r = firstResponse(rest);
      if (r.body === undefined) return false; // body not complete yet
      rest = r.rest;
    } catch {
      return false;
    }
  }
  return true;
}
