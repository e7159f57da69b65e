/**
 * Where a client-supplied LiveKit url may take the server (the SSRF policy of tool webhooks,
 * processors/tools/address-policy.ts, applied to `/realtime` `webrtc` LiveKit settings).
 *
 * The url's host is resolved once and every address it resolves to must pass the policy
 * (loopback, private, link-local, CGNAT, ... are refused unless the operator opened a range with
 * `SVC_LIVEKIT_ALLOWED_RANGES`). The LiveKit SDK (native code) resolves names itself and takes no
 * lookup function, so it is never given the name: it connects to a relay on 127.0.0.1 that this
 * module starts for the publication, and the relay connects to the checked address only (TLS for
 * `wss://`, with the url's host name as SNI and for the certificate check, and the url's `Host`
 * in the upgrade request). A DNS answer that changes after the check (DNS rebinding) therefore
 * cannot move the connection, including the SDK's reconnects.
 */
import { createServer, connect as netConnect, isIP, type Server, type Socket } from 'node:net';
import { connect as tlsConnect, rootCertificates } from 'node:tls';
import { resolveOptions } from '../../core/options.ts';
import { AddressPolicy } from '../../processors/tools/address-policy.ts';
import { resolveWebhookTarget, systemResolver, type HostResolver } from '../../processors/tools/webhook-target.ts';
import { errorMessage } from '../../core/error-message.ts';

export interface LiveKitTarget {
  readonly url: URL;
  readonly tls: boolean;
  /** Host name as written (without IPv6 brackets): TLS servername and certificate check. */
  readonly hostname: string;
  /** `Host` header value of the original url. */
  readonly host: string;
  readonly port: number;
  /** The checked address every connection goes to. */
  readonly address: string;
}

/** Thrown when the url must not be connected to; its message is for logs, not for clients. */
export class LiveKitAddressRefused extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'LiveKitAddressRefused';
  }
}

/** Parses, resolves and checks a `ws://` / `wss://` LiveKit url. */
export async function resolveLiveKitTarget(rawUrl: string, policy: AddressPolicy, resolver: HostResolver = systemResolver): Promise<LiveKitTarget> {
  const match = /^(wss?):\/\//i.exec(rawUrl);
  if (!match) throw new LiveKitAddressRefused('the LiveKit url must start with ws:// or wss://');
  const tls = match[1]!.toLowerCase() === 'wss';
  let target;
  try {
    // Same parsing, resolution and per-address check as webhooks, on the http(s) form of the url.
    target = await resolveWebhookTarget(`${tls ? 'https' : 'http'}${rawUrl.slice(match[1]!.length)}`, policy, resolver);
  } catch (error) {
    throw new LiveKitAddressRefused(errorMessage(error));
  }
  const url = new URL(rawUrl);
  return {
    url,
    tls,
    hostname: target.hostname,
    host: url.host,
    port: url.port ? Number(url.port) : tls ? 443 : 80,
    address: target.address,
  };
}

export interface PinnedRelay {
  /** `ws://127.0.0.1:<port>` plus the original path and query: hand this to the SDK. */
  readonly url: string;
  /** Connections made through the relay so far (tests, metrics). */
  readonly connections: number;
  close(): Promise<void>;
}

export const PINNED_RELAY_DEFAULTS = {
  /** Largest request head (16 KiB) the relay reads before forwarding; a connection whose head is longer is closed. */
  maxHeadBytes: 16_384,
} as const;

export interface PinnedRelayOptions {
  /** Extra CA certificates for `wss://` targets (tests; private CAs). */
  readonly ca?: string | readonly string[];
  readonly maxHeadBytes?: number;
}

const HEAD_END = Buffer.from('\r\n\r\n');

/** Replaces the `Host` header of an HTTP request head (the SDK names the relay there). */
function withHost(head: Buffer, host: string): Buffer {
  const text = head.toString('latin1');
  const lines = text.split('\r\n');
  let replaced = false;
  for (let i = 1; i < lines.length; i++) {
    if (/^host\s*:/i.test(lines[i]!)) {
      if (replaced) {
        lines.splice(i--, 1);
        continue;
      }
      lines[i] = `Host: ${host}`;
      replaced = true;
    }
  }
  if (!replaced) lines.splice(1, 0, `Host: ${host}`);
  return Buffer.from(lines.join('\r\n'), 'latin1');
}

/**
 * Starts a loopback relay to `target.address`. Every connection the SDK makes to it goes to the
 * checked address (and nowhere else); the first request head's `Host` is the url's.
 */
export async function startPinnedRelay(target: LiveKitTarget, options: PinnedRelayOptions = {}): Promise<PinnedRelay> {
  const maxHead = resolveOptions(PINNED_RELAY_DEFAULTS, options).maxHeadBytes;
  // Node's `ca` replaces the bundled roots, so extra CAs are appended to them.
  const ca = options.ca === undefined ? undefined : [...rootCertificates, ...(typeof options.ca === 'string' ? [options.ca] : options.ca)];
  const sockets = new Set<Socket>();
  let connections = 0;
  let closed = false;
  const track = (socket: Socket) => {
    if (closed) return void socket.destroy();
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  };
  const server: Server = createServer((client) => {
    connections++;
    track(client);
    let buffered = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      const end = buffered.indexOf(HEAD_END);
      if (end < 0) {
        if (buffered.length > maxHead) client.destroy();
        return;
      }
      client.off('data', onData);
      client.pause();
      if (closed) return void client.destroy();
      const head = withHost(buffered.subarray(0, end), target.host);
      const rest = buffered.subarray(end);
      const upstream: Socket = target.tls
        ? tlsConnect({ host: target.address, port: target.port, servername: isIP(target.hostname) ? undefined : target.hostname, ...(ca ? { ca } : {}) })
        : netConnect({ host: target.address, port: target.port });
      track(upstream);
      const fail = () => {
        client.destroy();
        upstream.destroy();
      };
      upstream.on('error', fail);
      client.on('error', fail);
      upstream.once(target.tls ? 'secureConnect' : 'connect', () => {
        upstream.write(Buffer.concat([head, rest]));
        client.pipe(upstream);
        upstream.pipe(client);
        client.resume();
      });
      upstream.on('close', () => client.destroy());
      client.on('close', () => upstream.destroy());
    };
    client.on('data', onData);
    client.on('error', () => client.destroy());
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  // Listening: the one-shot listener above is spent on nothing, and a later server error (an
  // accept failing when the process is out of file descriptors) without a listener would be an
  // uncaught exception. That connection is lost; the relay and the process go on.
  server.removeAllListeners('error');
  server.on('error', () => undefined);
  const { port } = server.address() as { port: number };
  return {
    url: `ws://127.0.0.1:${port}${target.url.pathname === '/' ? '' : target.url.pathname}${target.url.search}`,
    get connections() {
      return connections;
    },
    close() {
      closed = true;
      for (const socket of sockets) socket.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** The operator's ranges as a policy; throws `AddressPolicyError` on a bad entry. */
export function liveKitAddressPolicy(allowedRanges: readonly string[] = []): AddressPolicy {
  return new AddressPolicy(allowedRanges);
}
