/**
 * The Session API's hostname allowlist (spec "Authentication" 4). The request's `Origin` is
 * parsed as a browser sends it (`scheme://host[:port]`, nothing else) and its hostname compared
 * with the agent's `allowed_hostnames` exactly, case-insensitively: no subdomain, prefix or
 * suffix inference. `*` admits every origin and requests without one; an empty or absent list
 * admits nobody. Anything that is not a plain origin (`null`, userinfo, a path, a query, a
 * fragment, a non-web scheme, several values) is refused.
 */

export type OriginDecision = { readonly allowed: true; readonly hostname: string | null } | { readonly allowed: false; readonly reason: string };

const ORIGIN_SHAPE = /^(https?):\/\/([^/?#@\s\\]+)$/i;

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
  const hostname = originHostname(origin);
  if (hostname === null) return { allowed: false, reason: 'the Origin header is not a plain web origin' };
  if (wildcard) return { allowed: true, hostname };
  const bare = (h: string) => h.replace(/^\[(.*)\]$/, '$1');
  return allowed.some((h) => bare(h) === hostname)
    ? { allowed: true, hostname }
    : { allowed: false, reason: `origin hostname ${hostname} is not in the agent's allowed_hostnames` };
}
