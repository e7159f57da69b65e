/**
 * Turns a tool's webhook URL into a checked connection target: the URL is parsed with the WHATWG
 * parser (which normalises odd IPv4 spellings such as `2130706433`, `0177.0.0.1`, `0x7f.1` and
 * `127.1` to dotted quads), the host is resolved once, every address it resolves to is judged by
 * the `AddressPolicy`, and the caller connects to the checked address itself. Because the HTTP
 * client is never given a name to resolve, a DNS answer that changes between check and connect
 * (DNS rebinding) cannot redirect the request.
 */
import { lookup as dnsLookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import type { AddressPolicy } from './address-policy.ts';

export interface ResolvedAddress {
  readonly address: string;
  readonly family: 4 | 6;
}

/** Resolves a host name to every address it has. Injectable so tests need no real DNS. */
export type HostResolver = (hostname: string) => Promise<readonly ResolvedAddress[]>;

export const SYSTEM_RESOLVER_DEFAULTS = {
  /**
   * System lookups (`getaddrinfo`) in flight at once, per process. Each holds one of libuv's
   * threads (4 unless UV_THREADPOOL_SIZE says otherwise) until the system's resolver gives up,
   * whatever a caller's timeout says: an organization whose tool hosts' nameserver never answers
   * could otherwise hold every thread, and every file read, hash and lookup of every session in
   * the process would wait behind it.
   */
  maxInFlight: 2,
  /** Names waiting for a free lookup; past it a lookup is refused at once (`EBUSY`). */
  maxQueued: 256,
} as const;

type SystemLookup = (hostname: string) => Promise<ReadonlyArray<{ address: string; family: number }>>;

/**
 * A resolver on the system's (hosts file, then DNS, as the machine is set up) with at most
 * `maxInFlight` lookups running, a queue in arrival order behind them, and one lookup per name
 * however many callers ask for it meanwhile.
 */
export function createSystemResolver(options: { readonly lookup?: SystemLookup; readonly maxInFlight?: number; readonly maxQueued?: number } = {}): HostResolver {
  const lookup: SystemLookup = options.lookup ?? ((hostname) => dnsLookup(hostname, { all: true, verbatim: true }));
  const maxInFlight = options.maxInFlight ?? SYSTEM_RESOLVER_DEFAULTS.maxInFlight;
  const maxQueued = options.maxQueued ?? SYSTEM_RESOLVER_DEFAULTS.maxQueued;
  const byName = new Map<string, Promise<readonly ResolvedAddress[]>>();
  const queue: Array<() => void> = [];
  let running = 0;
  const release = () => {
    running--;
    queue.shift()?.();
  };
  const slot = (): Promise<void> => {
    if (running < maxInFlight) {
      running++;
      return Promise.resolve();
    }
    if (queue.length >= maxQueued) return Promise.reject(Object.assign(new Error('too many host lookups waiting'), { code: 'EBUSY' }));
    return new Promise((resolve) => queue.push(() => (running++, resolve())));
  };
  return (hostname) => {
    const pending = byName.get(hostname);
    if (pending) return pending;
    const answer = slot().then(async () => {
      try {
        const answers = await lookup(hostname);
        return answers.map((a): ResolvedAddress => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));
      } finally {
        release();
      }
    });
    const settled = () => {
      if (byName.get(hostname) === answer) byName.delete(hostname);
    };
    answer.then(settled, settled);
    byName.set(hostname, answer);
    return answer;
  };
}

/** The process's one system resolver: its bound on lookups in flight is the process's. */
export const systemResolver: HostResolver = createSystemResolver();

export type WebhookRefusalCode = 'invalid_url' | 'unsupported_scheme' | 'unresolvable_host' | 'forbidden_address';

export class WebhookRefusedError extends Error {
  constructor(
    readonly code: WebhookRefusalCode,
    message: string,
  ) {
    super(message);
    this.name = 'WebhookRefusedError';
  }
}

export interface WebhookTarget {
  readonly url: URL;
  /** Host name as written in the URL (without IPv6 brackets): Host header and TLS servername. */
  readonly hostname: string;
  /** The checked address the connection must go to. */
  readonly address: string;
  readonly family: 4 | 6;
}

/** Parses and resolves `rawUrl`; throws `WebhookRefusedError` when it must not be called. */
export async function resolveWebhookTarget(
  rawUrl: string,
  policy: AddressPolicy,
  resolver: HostResolver = systemResolver,
): Promise<WebhookTarget> {
  let url: URL;
  try {
    url = new URL(rawUrl);
  } catch {
    throw new WebhookRefusedError('invalid_url', `not a valid URL: ${JSON.stringify(rawUrl.slice(0, 200))}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new WebhookRefusedError('unsupported_scheme', `scheme ${url.protocol} is not allowed; use http or https`);
  }
  const hostname = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  if (hostname === '') throw new WebhookRefusedError('invalid_url', 'URL has no host');

  let candidates: readonly ResolvedAddress[];
  const literalFamily = isIP(hostname);
  if (literalFamily !== 0) {
    candidates = [{ address: hostname, family: literalFamily === 6 ? 6 : 4 }];
  } else {
    try {
      candidates = await resolver(hostname);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
      throw new WebhookRefusedError('unresolvable_host', `host ${hostname} does not resolve (${code})`);
    }
    if (candidates.length === 0) throw new WebhookRefusedError('unresolvable_host', `host ${hostname} has no addresses`);
  }

  // Every answer must pass: a name that resolves to one public and one private address could
  // otherwise be steered to the private one by whoever controls its DNS.
  for (const candidate of candidates) {
    const verdict = policy.check(candidate.address);
    if (!verdict.allowed) {
      const via = literalFamily !== 0 ? '' : ` (resolved from ${hostname})`;
      throw new WebhookRefusedError('forbidden_address', `${verdict.address}${via} is refused: ${verdict.reason}`);
    }
  }
  const chosen = candidates[0]!;
  return { url, hostname, address: chosen.address, family: chosen.family };
}
