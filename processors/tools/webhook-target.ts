/**
 * Turns a tool's webhook URL into a checked connection target: the URL is parsed with the WHATWG
 * parser (which normalises odd IPv4 spellings such as `2130706433`, `0177.0.0.1`, `0x7f.1` and
 * `127.1` to dotted quads), the host is resolved once, every address it resolves to is judged by
 * the `AddressPolicy`, and the caller connects to the checked address itself. Because the HTTP
 * client is never given a name to resolve, a DNS answer that changes between check and connect
 * (DNS rebinding) cannot redirect the request.
 */
import { lookup as dnsLookup, Resolver } from 'node:dns/promises';
import { isIP } from 'node:net';
import type { AddressPolicy } from './address-policy.ts';

export interface ResolvedAddress {
  readonly address: string;
  readonly family: 4 | 6;
}

/** Resolves a host name to every address it has. Injectable so tests need no real DNS. */
export type HostResolver = (hostname: string) => Promise<readonly ResolvedAddress[]>;

export const SYSTEM_RESOLVER_DEFAULTS = {
  /** DNS queries (c-ares, on the event loop): each try waits this long (ms) for an answer. */
  dnsTimeoutMs: 2_000,
  dnsTries: 2,
  /**
   * System lookups (`getaddrinfo`) in flight at once, per process, for the names DNS does not
   * know (the hosts file, `localhost`, other name services). Each holds one of libuv's threads
   * (4 unless UV_THREADPOOL_SIZE says otherwise) until the system's resolver gives up, whatever a
   * caller's timeout says, and file reads and hashing wait for those threads.
   */
  maxInFlight: 2,
  /** Names waiting for a free system lookup; past it a lookup is refused at once (`EBUSY`). */
  maxQueued: 256,
} as const;

type SystemLookup = (hostname: string) => Promise<ReadonlyArray<{ address: string; family: number }>>;
/** A DNS query of both families: the addresses found, or a rejection with its `code` (`ENOTFOUND`, `ETIMEOUT`...). */
export type DnsQuery = (hostname: string) => Promise<readonly ResolvedAddress[]>;

/** Codes of a DNS query that mean the nameserver did not answer: the system's lookup would wait for it too. */
const NO_ANSWER = new Set(['ETIMEOUT', 'ETIMEDOUT']);

function caresQuery(): DnsQuery {
  let resolver: Resolver | null = null;
  return async (hostname) => {
    resolver ??= new Resolver({ timeout: SYSTEM_RESOLVER_DEFAULTS.dnsTimeoutMs, tries: SYSTEM_RESOLVER_DEFAULTS.dnsTries });
    const [v4, v6] = await Promise.allSettled([resolver.resolve4(hostname), resolver.resolve6(hostname)]);
    const found: ResolvedAddress[] = [
      ...(v4.status === 'fulfilled' ? v4.value.map((address): ResolvedAddress => ({ address, family: 4 })) : []),
      ...(v6.status === 'fulfilled' ? v6.value.map((address): ResolvedAddress => ({ address, family: 6 })) : []),
    ];
    if (found.length) return found;
    const failures = [v4, v6].flatMap((r) => (r.status === 'rejected' ? [r.reason as NodeJS.ErrnoException] : []));
    throw failures.find((e) => NO_ANSWER.has(e.code ?? '')) ?? failures[0] ?? Object.assign(new Error(`${hostname} has no addresses`), { code: 'ENODATA' });
  };
}

/**
 * The resolver of webhook and LiveKit hosts: DNS first, through c-ares (asynchronous, on the
 * event loop: a nameserver that never answers costs a timer, not a thread), then, for names DNS
 * does not know (`localhost`, the hosts file, other name services), the system's lookup with at
 * most `maxInFlight` running and a queue in arrival order behind them. One lookup per name runs
 * however many callers ask for it meanwhile. A name DNS timed out on is not looked up again by
 * the system: its resolver would wait on the same nameserver, holding a thread.
 */
export function createSystemResolver(options: { readonly query?: DnsQuery; readonly lookup?: SystemLookup; readonly maxInFlight?: number; readonly maxQueued?: number } = {}): HostResolver {
  const query = options.query ?? caresQuery();
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
  const systemLookup = async (hostname: string): Promise<readonly ResolvedAddress[]> => {
    await slot();
    try {
      const answers = await lookup(hostname);
      return answers.map((a): ResolvedAddress => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));
    } finally {
      release();
    }
  };
  const resolve = async (hostname: string): Promise<readonly ResolvedAddress[]> => {
    const local = hostname.toLowerCase();
    if (local === 'localhost' || local.endsWith('.localhost')) return systemLookup(hostname);
    try {
      return await query(hostname);
    } catch (err) {
      if (NO_ANSWER.has((err as NodeJS.ErrnoException).code ?? '')) throw err;
      return systemLookup(hostname);
    }
  };
  return (hostname) => {
    const pending = byName.get(hostname);
    if (pending) return pending;
    const answer = resolve(hostname);
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
