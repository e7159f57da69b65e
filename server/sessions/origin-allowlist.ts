/**
 * The Session API's hostname allowlist (spec "Authentication" 4). The request's `Origin` is
 * parsed as a browser sends it (`scheme://host[:port]`, nothing else) and its hostname compared
 * with the agent's `allowed_hostnames` exactly, case-insensitively: no subdomain, prefix or
 * suffix inference. `*` admits every origin, as the spec says (the opaque `null` of sandboxed
 * frames and `file:` pages, and other schemes' origins such as a browser extension's, included),
 * and requests without one; an empty or absent list admits nobody. A list of hostnames admits
 * only plain web origins. Anything that is not an origin at all (userinfo, a path, a query, a
 * fragment, several values, a non-canonical host) is refused, even by `*`.
 */

export type OriginDecision = { readonly allowed: true; readonly hostname: string | null } | { readonly allowed: false; readonly reason: string };

const ORIGIN_SHAPE = /^(https?):\/\/([^/?#@\s\\]+)$/i;
/** The serialisation of a tuple origin of any scheme (`chrome-extension://<id>`): scheme, `://`, a bare host[:port]. */
const ANY_SCHEME_ORIGIN = /^[a-z][a-z0-9+.-]*:\/\/[a-z0-9.-]+(?::\d{1,5})?$/i;

/**
 * Whether `origin` is an origin a browser may send that `*` admits: the opaque `null`, a plain
 * web origin, or another scheme's origin (a browser extension's). Not a list, path or userinfo.
 */
function isAnyOrigin(origin: string): boolean {
  if (origin === 'null') return true;
  if (/^https?:/i.test(origin)) return originHostname(origin) !== null;
  return ANY_SCHEME_ORIGIN.test(origin);
}

/** The hostname of a well-formed web origin (lower case, IPv6 without brackets), or null. */
export function originHostname(origin: string): string | null {
  const shape = ORIGIN_SHAPE.exec(origin);
  if (!shape) return null;
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    return null;
  }
  if (url.username || url.password || url.pathname !== '/' || url.search || url.hash) return null;
  // The parser normalises (`%2e`, IDNA, dotted forms); what it made must still be what was sent,
  // so an origin the browser would never send cannot slip through a normalisation.
  const authority = shape[2]!.toLowerCase();
  const expected = url.port ? `${url.hostname}:${url.port}` : url.hostname;
  if (authority !== expected && authority !== `${expected}:${url.protocol === 'https:' ? '443' : '80'}`) return null;
  return url.hostname.replace(/^\[(.*)\]$/, '$1');
}

export function checkOrigin(allowedHostnames: readonly string[] | null | undefined, origin: string | undefined): OriginDecision {
  const allowed = (allowedHostnames ?? []).map((h) => h.trim().toLowerCase()).filter((h) => h.length > 0);
  if (allowed.length === 0) return { allowed: false, reason: 'this agent admits no hostnames (allowed_hostnames is empty)' };
  const wildcard = allowed.includes('*');
  if (origin === undefined) {
    return wildcard ? { allowed: true, hostname: null } : { allowed: false, reason: 'requests without an Origin header are admitted only by `*`' };
  }
  if (wildcard) {
    return isAnyOrigin(origin) ? { allowed: true, hostname: originHostname(origin) } : { allowed: false, reason: 'the Origin header is not an origin' };
  }
  const hostname = originHostname(origin);
  if (hostname === null) return { allowed: false, reason: 'the Origin header is not a plain web origin' };
  const bare = (h: string) => h.replace(/^\[(.*)\]$/, '$1');
  return allowed.some((h) => bare(h) === hostname)
    ? { allowed: true, hostname }
    : { allowed: false, reason: `origin hostname ${hostname} is not in the agent's allowed_hostnames` };
}
