/**
 * Which network addresses a tool webhook may reach (the SSRF policy).
 *
 * The rule is an allowlist, not a blocklist: an IPv4 address passes only if it is ordinary public
 * unicast, an IPv6 address only if it is public unicast inside 2000::/3. Everything else
 * (loopback, RFC 1918, link-local, CGNAT, multicast, broadcast, unspecified, reserved,
 * benchmarking, documentation, IPv6 ULA, ...) is refused, so a range nobody thought of is refused
 * too. IPv6 forms that carry an IPv4 address (IPv4-mapped, IPv4-compatible, IPv4-translated,
 * NAT64 64:ff9b::/96, 6to4, Teredo) are judged by the IPv4 addresses they carry: `::ffff:127.0.0.1`
 * is loopback, while a DNS64 resolver's `64:ff9b::8.8.8.8` stays usable.
 *
 * Operators may open chosen ranges (e.g. a private network where their webhooks live) with
 * `allowedRanges`; nothing is open by default.
 */
import ipaddr from 'ipaddr.js';

type IP = ipaddr.IPv4 | ipaddr.IPv6;

export type AddressVerdict =
  | { readonly allowed: true; readonly address: string; readonly viaOperatorRange?: string }
  | { readonly allowed: false; readonly address: string; readonly reason: string };

export class AddressPolicyError extends Error {
  readonly code = 'invalid_allowed_range';
}

/** RFC 6052 well-known NAT64 prefix; only this /96 embeds a globally meaningful IPv4 address. */
const NAT64_WELL_KNOWN: [ipaddr.IPv6, number] = [ipaddr.IPv6.parse('64:ff9b::'), 96];
/** Deprecated IPv4-compatible addresses (::a.b.c.d); ipaddr.js calls them plain unicast. */
const IPV4_COMPATIBLE: [ipaddr.IPv6, number] = [ipaddr.IPv6.parse('::'), 96];
/** IANA global unicast space; addresses outside it are not routable on the internet. */
const GLOBAL_UNICAST_V6: [ipaddr.IPv6, number] = [ipaddr.IPv6.parse('2000::'), 3];

export class AddressPolicy {
  private readonly allowed: readonly { readonly cidr: string; readonly range: [IP, number] }[];

  /**
   * @param allowedRanges CIDRs (or single addresses) the operator opens despite the default
   *   refusal, e.g. `['10.20.0.0/16', '127.0.0.1/32']`. Throws `AddressPolicyError` on a bad entry,
   *   so a typo in configuration fails at start-up rather than silently opening nothing.
   */
  constructor(allowedRanges: readonly string[] = []) {
    this.allowed = allowedRanges.map((cidr) => ({ cidr, range: parseRange(cidr) }));
  }

  /** Judges one literal address (as returned by a resolver or found in a URL). */
  check(literal: string): AddressVerdict {
    let ip: IP;
    try {
      ip = ipaddr.parse(stripBrackets(literal));
    } catch {
      return { allowed: false, address: literal, reason: 'not an IP address' };
    }
    const address = ip.toString();
    const opened = this.operatorRange(ip);
    if (opened) return { allowed: true, address, viaOperatorRange: opened };
    const reason = refusalReason(ip, (v4) => this.operatorRange(v4));
    return reason === undefined ? { allowed: true, address } : { allowed: false, address, reason };
  }

  private operatorRange(ip: IP): string | undefined {
    for (const { cidr, range } of this.allowed) {
      if (range[0].kind() === ip.kind() && ip.match(range)) return cidr;
    }
    return undefined;
  }
}

function parseRange(cidr: string): [IP, number] {
  try {
    if (cidr.includes('/')) return ipaddr.parseCIDR(cidr);
    const ip = ipaddr.parse(cidr);
    return [ip, ip.kind() === 'ipv4' ? 32 : 128];
  } catch {
    throw new AddressPolicyError(`allowed webhook range ${JSON.stringify(cidr)} is not a valid CIDR or address`);
  }
}

function stripBrackets(s: string): string {
  return s.startsWith('[') && s.endsWith(']') ? s.slice(1, -1) : s;
}

/** undefined = public; otherwise why the address is refused. */
function refusalReason(ip: IP, operatorRange: (v4: ipaddr.IPv4) => string | undefined): string | undefined {
  if (ip.kind() === 'ipv4') {
    const range = (ip as ipaddr.IPv4).range();
    return range === 'unicast' ? undefined : `${ipv4RangeName(range)} IPv4 address`;
  }
  const v6 = ip as ipaddr.IPv6;
  if (v6.zoneId) return 'IPv6 address with a zone id';
  const embedded = embeddedIPv4(v6);
  if (embedded) {
    for (const v4 of embedded.addresses) {
      if (operatorRange(v4)) continue;
      const inner = refusalReason(v4, operatorRange);
      if (inner) return `${embedded.form} IPv6 address embedding ${v4.toString()} (${inner})`;
    }
    return undefined;
  }
  const range = v6.range();
  if (range !== 'unicast') return `${ipv6RangeName(range)} IPv6 address`;
  if (!v6.match(GLOBAL_UNICAST_V6)) return 'IPv6 address outside global unicast space (2000::/3)';
  return undefined;
}

/** The IPv4 addresses an IPv6 transition form would deliver traffic to, if it is one. */
function embeddedIPv4(v6: ipaddr.IPv6): { form: string; addresses: ipaddr.IPv4[] } | undefined {
  const p = v6.parts;
  const v4 = (hi: number, lo: number) => new ipaddr.IPv4([hi >> 8, hi & 0xff, lo >> 8, lo & 0xff]);
  const range = v6.range();
  if (range === 'ipv4Mapped') return { form: 'IPv4-mapped', addresses: [v6.toIPv4Address()] };
  if (range === 'rfc6145') return { form: 'IPv4-translated', addresses: [v4(p[6]!, p[7]!)] };
  if (range === 'rfc6052') {
    // 64:ff9b:1::/48 is the local-use NAT64 prefix (RFC 8215): the operator's own translator.
    if (!v6.match(NAT64_WELL_KNOWN)) return { form: 'local-use NAT64', addresses: [new ipaddr.IPv4([0, 0, 0, 0])] };
    return { form: 'NAT64', addresses: [v4(p[6]!, p[7]!)] };
  }
  if (range === '6to4') return { form: '6to4', addresses: [v4(p[1]!, p[2]!)] };
  if (range === 'teredo') {
    // Teredo: server address in clear, client address bit-inverted in the last 32 bits.
    return { form: 'Teredo', addresses: [v4(p[2]!, p[3]!), v4(p[6]! ^ 0xffff, p[7]! ^ 0xffff)] };
  }
  // ::/128 and ::1/128 are classified by ipaddr.js itself; the rest of ::/96 is IPv4-compatible.
  if (range === 'unicast' && v6.match(IPV4_COMPATIBLE)) return { form: 'IPv4-compatible', addresses: [v4(p[6]!, p[7]!)] };
  return undefined;
}

const IPV4_RANGE_NAMES: Readonly<Record<string, string>> = {
  unspecified: 'unspecified (0.0.0.0/8)',
  broadcast: 'broadcast',
  multicast: 'multicast',
  linkLocal: 'link-local',
  loopback: 'loopback',
  carrierGradeNat: 'carrier-grade NAT (100.64.0.0/10)',
  private: 'private (RFC 1918)',
  reserved: 'reserved, documentation or benchmarking',
  as112: 'AS112 DNS sink',
  amt: 'AMT relay anycast',
};

function ipv4RangeName(range: string): string {
  return IPV4_RANGE_NAMES[range] ?? range;
}

const IPV6_RANGE_NAMES: Readonly<Record<string, string>> = {
  unspecified: 'unspecified',
  linkLocal: 'link-local',
  multicast: 'multicast',
  loopback: 'loopback',
  uniqueLocal: 'unique local (fc00::/7)',
  deprecatedSiteLocal: 'site-local',
  discard: 'discard-only',
  benchmarking: 'benchmarking',
  reserved: 'reserved or documentation',
};

function ipv6RangeName(range: string): string {
  return IPV6_RANGE_NAMES[range] ?? range;
}
