/**
 * How the embedded rooms' peer connections cross networks (docs/webrtc.md, "Deploying across
 * NAT"): STUN/TURN servers for both sides, per-session TURN credentials in coturn's shared-secret
 * mode, the public address of a 1:1 NAT announced in place of the private one, the UDP port range
 * the server's peers bind, and the ICE transport policy.
 *
 * TURN credentials follow the "TURN REST API" convention that coturn implements with
 * `use-auth-secret` / `static-auth-secret`: username `<expiry unix seconds>:<id>`, credential the
 * base64 HMAC-SHA1 of the username keyed with the shared secret. The secret never leaves the
 * server; each joining visitor (and each server-side peer) gets a credential of its own that
 * expires with its session, so nothing long-lived reaches a browser.
 */
import { createHmac, randomUUID } from 'node:crypto';
import { isIP } from 'node:net';

export interface TurnSecretSettings {
  /** coturn's `static-auth-secret`. */
  readonly secret: string;
  /** `turn:` / `turns:` URLs the credentials are for. */
  readonly urls: readonly string[];
  /** Credential lifetime when the room has no end of its own (rooms of sessions end with the session limit). */
  readonly ttlS: number;
}

export interface RtcNetworkSettings {
  /** STUN/TURN servers given as they are to both sides (`SVC_ICE_SERVERS`). */
  readonly iceServers: readonly RTCIceServer[];
  /** Per-session TURN credentials (`SVC_TURN_SECRET`, `SVC_TURN_URLS`, `SVC_TURN_TTL_S`); null: none. */
  readonly turn: TurnSecretSettings | null;
  /** IPv4 address announced instead of the server's own host addresses (`SVC_RTC_ANNOUNCED_ADDRESS`). */
  readonly announcedAddress: string | null;
  /** UDP ports of the server's peers (`SVC_RTC_PORT_MIN`/`SVC_RTC_PORT_MAX`); null: any. */
  readonly portRange: { readonly min: number; readonly max: number } | null;
  /** `relay`: both sides use relayed candidates only (`SVC_ICE_TRANSPORT_POLICY`). */
  readonly iceTransportPolicy: 'all' | 'relay';
}

export const RTC_NETWORK_DEFAULTS: RtcNetworkSettings = {
  iceServers: [],
  turn: null,
  announcedAddress: null,
  portRange: null,
  iceTransportPolicy: 'all',
};

export const TURN_DEFAULTS = {
  /** Credential lifetime for rooms without an end of their own (`/realtime` publishing). */
  ttlS: 3600,
  /** Added to a room's end: a credential must outlive the session's last allocation refresh. */
  marginS: 60,
} as const;

/** A setting the rooms cannot run with; the message names the variable (one line). */
export class RtcSettingsError extends Error {
  readonly code = 'invalid_configuration';
}

const ICE_URL = /^(stun|stuns|turn|turns):[^\s,]+$/i;

function checkIceUrl(url: string, setting: string): string {
  if (!ICE_URL.test(url)) throw new RtcSettingsError(`${setting}: ${JSON.stringify(url)} is not a stun:, stuns:, turn: or turns: URL`);
  return url;
}

/** `SVC_ICE_SERVERS`: comma-separated URLs, or a JSON array of RTCIceServer objects (for TURN with a fixed username and credential). */
export function parseIceServers(text: string | undefined, setting = 'SVC_ICE_SERVERS'): RTCIceServer[] {
  const raw = text?.trim();
  if (!raw) return [];
  if (raw.startsWith('[')) {
    let value: unknown;
    try {
      value = JSON.parse(raw);
    } catch {
      throw new RtcSettingsError(`${setting} is neither a list of URLs nor a JSON array of {urls, username?, credential?}`);
    }
    if (!Array.isArray(value)) throw new RtcSettingsError(`${setting} must be a JSON array`);
    return value.map((entry, i) => {
      if (!entry || typeof entry !== 'object') throw new RtcSettingsError(`${setting}[${i}] must be an object {urls, username?, credential?}`);
      const e = entry as Record<string, unknown>;
      const urls = typeof e.urls === 'string' ? [e.urls] : Array.isArray(e.urls) && e.urls.every((u) => typeof u === 'string') ? (e.urls as string[]) : null;
      if (!urls || urls.length === 0) throw new RtcSettingsError(`${setting}[${i}].urls must be a URL or a list of URLs`);
      urls.forEach((u) => checkIceUrl(u, `${setting}[${i}].urls`));
      if (e.username !== undefined && typeof e.username !== 'string') throw new RtcSettingsError(`${setting}[${i}].username must be a string`);
      if (e.credential !== undefined && typeof e.credential !== 'string') throw new RtcSettingsError(`${setting}[${i}].credential must be a string`);
      const server: RTCIceServer = { urls };
      if (e.username !== undefined) server.username = e.username as string;
      if (e.credential !== undefined) server.credential = e.credential as string;
      if (urls.some((u) => /^turns?:/i.test(u)) && (server.username === undefined || server.credential === undefined)) {
        throw new RtcSettingsError(`${setting}[${i}]: a TURN server needs a username and a credential (or use SVC_TURN_SECRET for per-session credentials)`);
      }
      return server;
    });
  }
  const urls = raw.split(',').map((u) => u.trim()).filter(Boolean);
  for (const url of urls) {
    checkIceUrl(url, setting);
    if (/^turns?:/i.test(url)) throw new RtcSettingsError(`${setting}: ${url} is a TURN server: give its credentials as JSON ([{"urls": ..., "username": ..., "credential": ...}]) or use SVC_TURN_SECRET`);
  }
  return urls.length ? [{ urls }] : [];
}

/** Everything of `RtcNetworkSettings` from the environment's strings; throws `RtcSettingsError` naming the setting. */
export function rtcNetworkFromStrings(env: Readonly<Record<string, string | undefined>>): RtcNetworkSettings {
  const iceServers = parseIceServers(env.SVC_ICE_SERVERS);
  const secret = env.SVC_TURN_SECRET?.trim() ?? '';
  const turnUrls = (env.SVC_TURN_URLS ?? '').split(',').map((u) => u.trim()).filter(Boolean);
  let turn: TurnSecretSettings | null = null;
  if (secret || turnUrls.length) {
    if (!secret) throw new RtcSettingsError('SVC_TURN_URLS needs SVC_TURN_SECRET (coturn static-auth-secret)');
    if (secret.length < 16) throw new RtcSettingsError('SVC_TURN_SECRET must be at least 16 characters (coturn static-auth-secret)');
    if (!turnUrls.length) throw new RtcSettingsError('SVC_TURN_SECRET needs SVC_TURN_URLS (the turn: URLs of that server)');
    for (const url of turnUrls) {
      checkIceUrl(url, 'SVC_TURN_URLS');
      if (!/^turns?:/i.test(url)) throw new RtcSettingsError(`SVC_TURN_URLS: ${url} is not a turn: or turns: URL`);
    }
    const ttlText = env.SVC_TURN_TTL_S?.trim();
    const ttlS = ttlText ? Number(ttlText) : TURN_DEFAULTS.ttlS;
    if (!Number.isInteger(ttlS) || ttlS < 60 || ttlS > 7 * 86_400) throw new RtcSettingsError(`SVC_TURN_TTL_S must be a whole number of seconds from 60 to 604800, got ${JSON.stringify(ttlText)}`);
    turn = { secret, urls: turnUrls, ttlS };
  } else if (env.SVC_TURN_TTL_S?.trim()) {
    throw new RtcSettingsError('SVC_TURN_TTL_S needs SVC_TURN_SECRET and SVC_TURN_URLS');
  }
  const announced = env.SVC_RTC_ANNOUNCED_ADDRESS?.trim() || null;
  if (announced !== null && isIP(announced) !== 4) throw new RtcSettingsError(`SVC_RTC_ANNOUNCED_ADDRESS must be an IPv4 address (the public side of a 1:1 NAT), got ${JSON.stringify(announced)}`);
  const minText = env.SVC_RTC_PORT_MIN?.trim();
  const maxText = env.SVC_RTC_PORT_MAX?.trim();
  let portRange: RtcNetworkSettings['portRange'] = null;
  if (minText || maxText) {
    if (!minText || !maxText) throw new RtcSettingsError(`SVC_RTC_PORT_MIN and SVC_RTC_PORT_MAX go together (got only ${minText ? 'SVC_RTC_PORT_MIN' : 'SVC_RTC_PORT_MAX'})`);
    const min = Number(minText);
    const max = Number(maxText);
    if (!Number.isInteger(min) || min < 1024 || min > 65535) throw new RtcSettingsError(`SVC_RTC_PORT_MIN must be a UDP port from 1024 to 65535, got ${JSON.stringify(minText)}`);
    if (!Number.isInteger(max) || max < min || max > 65535) throw new RtcSettingsError(`SVC_RTC_PORT_MAX must be a UDP port from SVC_RTC_PORT_MIN (${min}) to 65535, got ${JSON.stringify(maxText)}`);
    portRange = { min, max };
  }
  const policyText = (env.SVC_ICE_TRANSPORT_POLICY?.trim() || 'all').toLowerCase();
  if (policyText !== 'all' && policyText !== 'relay') throw new RtcSettingsError(`SVC_ICE_TRANSPORT_POLICY must be all or relay, got ${JSON.stringify(env.SVC_ICE_TRANSPORT_POLICY)}`);
  const settings: RtcNetworkSettings = { iceServers, turn, announcedAddress: announced, portRange, iceTransportPolicy: policyText };
  checkRtcNetwork(settings);
  return settings;
}

/** The settings' own consistency (also for settings given in code). */
export function checkRtcNetwork(settings: RtcNetworkSettings): void {
  const hasTurn = settings.turn !== null || settings.iceServers.some((s) => (typeof s.urls === 'string' ? [s.urls] : s.urls).some((u) => /^turns?:/i.test(u)));
  if (settings.iceTransportPolicy === 'relay' && !hasTurn) throw new RtcSettingsError('SVC_ICE_TRANSPORT_POLICY=relay needs a TURN server (SVC_TURN_SECRET + SVC_TURN_URLS, or a turn: entry in SVC_ICE_SERVERS)');
}

/**
 * A TURN credential for `id`, valid until `expiresAtS` (unix seconds): coturn's shared-secret
 * ("TURN REST API") convention.
 */
export function mintTurnCredential(turn: TurnSecretSettings, expiresAtS: number, id: string = randomUUID()): RTCIceServer {
  const username = `${Math.floor(expiresAtS)}:${id}`;
  const credential = createHmac('sha1', turn.secret).update(username).digest('base64');
  return { urls: [...turn.urls], username, credential };
}

/**
 * The ICE servers one peer (a visitor's browser or a server-side peer) gets: the static ones and,
 * with a TURN secret, a fresh credential expiring at `untilMs` (+ a margin) or after the TTL when
 * the room has no end.
 */
export function iceServersFor(settings: RtcNetworkSettings, untilMs: number | null, nowMs: number = Date.now(), id?: string): RTCIceServer[] {
  const servers = settings.iceServers.map((s) => ({ ...s }));
  if (settings.turn) {
    const expiresAtS = untilMs === null ? nowMs / 1000 + settings.turn.ttlS : untilMs / 1000 + TURN_DEFAULTS.marginS;
    servers.push(mintTurnCredential(settings.turn, expiresAtS, id));
  }
  return servers;
}

/** The literal IP hosts of the configured STUN/TURN URLs (their relay candidates are admitted from visitors). */
export function iceServerAddresses(settings: RtcNetworkSettings): string[] {
  const urls = [...settings.iceServers.flatMap((s) => (typeof s.urls === 'string' ? [s.urls] : s.urls)), ...(settings.turn?.urls ?? [])];
  const hosts = new Set<string>();
  for (const url of urls) {
    const rest = url.replace(/^[a-z]+:/i, '').split('?')[0]!;
    const host = rest.startsWith('[') ? rest.slice(1, rest.indexOf(']')) : rest.split(':')[0]!;
    if (isIP(host)) hosts.add(host);
  }
  return [...hosts];
}

/** `candidate:<foundation> <component> <transport> <priority> <address> <port> typ <type> ...` */
const CANDIDATE_FIELDS = /^(a=)?(candidate:\S+ \d+ (\S+) \d+ )(\S+)( (\d+) typ (\S+).*)$/i;

/** Loopback and link-local: never reachable from another machine. */
const LOCAL_ONLY = /^(127\.|169\.254\.|::1$|fe[89ab][0-9a-f]:)/i;

/**
 * One of our own candidates as the other side must see it: an IPv4 host candidate names the
 * announced address instead of the private one. Returns null for a candidate to withhold: a
 * loopback or link-local host candidate (with an announced address the server is reached from
 * elsewhere, where those only make the visitor check its own machine), or a second host candidate
 * that would announce the same address and port.
 */
export function announceCandidate(candidate: string, announcedAddress: string | null, seen?: Set<string>): string | null {
  if (announcedAddress === null) return candidate;
  const m = CANDIDATE_FIELDS.exec(candidate);
  if (!m) return candidate;
  const [, prefix = '', head, transport, address, tail, port, type] = m;
  if (type!.toLowerCase() !== 'host') return candidate;
  if (LOCAL_ONLY.test(address!)) return null;
  if (isIP(address!) !== 4) return candidate;
  const key = `${transport!.toLowerCase()} ${port}`;
  if (seen) {
    if (seen.has(key)) return null;
    seen.add(key);
  }
  return `${prefix}${head}${announcedAddress}${tail}`;
}

/** Every `a=candidate` line of a session description through `announceCandidate`. */
export function announceInSdp(sdp: string, announcedAddress: string | null): string {
  if (announcedAddress === null) return sdp;
  const eol = sdp.includes('\r\n') ? '\r\n' : '\n';
  const seenPerSection: Set<string>[] = [];
  let section = -1;
  const out: string[] = [];
  for (const line of sdp.split(/\r?\n/)) {
    if (line.startsWith('m=')) section++;
    if (line.startsWith('a=candidate:')) {
      const seen = (seenPerSection[Math.max(0, section)] ??= new Set());
      const rewritten = announceCandidate(line, announcedAddress, seen);
      if (rewritten !== null) out.push(rewritten);
      continue;
    }
    out.push(line);
  }
  return out.join(eol);
}

/** The RTCConfiguration of a server-side peer (wrtc accepts the non-standard `portRange`). */
export function serverPeerConfiguration(settings: RtcNetworkSettings, iceServers: readonly RTCIceServer[]): RTCConfiguration & { portRange?: { min: number; max: number } } {
  return {
    iceServers: [...iceServers],
    iceTransportPolicy: settings.iceTransportPolicy,
    ...(settings.portRange ? { portRange: { min: settings.portRange.min, max: settings.portRange.max } } : {}),
  };
}
