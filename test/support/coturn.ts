/**
 * coturn (`turnserver`, Debian's coturn package) inside a test host, in TURN REST / shared-secret
 * mode (`use-auth-secret`): the mode the service's `SVC_TURN_SECRET` speaks. A credential is
 * username `<expiry unix s>:<id>`, password base64(HMAC-SHA1(secret, username)); coturn refuses a
 * username whose expiry has passed and a password made with another secret (401).
 *
 * The configuration is generated into a temp dir (pidfile, userdb and config there; nothing of the
 * machine's own coturn, /etc/turnserver.conf or /var/lib/turn, is read or written), the process
 * logs to stdout, and it is ready once both the UDP and the TCP listener on 3478 are open.
 *
 * What an operator must enable for TURN over TCP (visitors whose networks drop UDP):
 * - coturn listens on TCP 3478 as well as UDP unless `no-tcp` is set: do not set it, and open TCP
 *   3478 in the firewall and the security group, not only UDP;
 * - hand the TCP URL to clients explicitly: `turn:<host>:3478?transport=tcp` (a browser tries
 *   `turn:<host>:3478` over UDP only);
 * - networks that pass nothing but HTTPS need TURN over TLS on 443 (`turns:<host>:443?transport=tcp`):
 *   `tls-listening-port=443`, `cert=`/`pkey=` with a certificate for the host name, and no
 *   `no-tls` (these tests use `no-tls`: there is no TLS to prove on a namespace network);
 * - the relayed side is UDP whatever the client used: the relay port range (`min-port`..`max-port`,
 *   default 49152-65535) must be open inbound UDP towards the coturn host;
 * - behind a 1:1 NAT (a cloud VM), `external-ip=<public>/<private>` so the relay addresses coturn
 *   hands out are the public ones.
 * Also for any deployment: `denied-peer-ip` for private, loopback and link-local ranges, so the
 * relay is not a way into the operator's own network (set here as an operator would).
 */
import { createHmac, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { GroupProcess } from './process-group.ts';
import type { Host, TestNetwork } from './netns.ts';

export const TURN_PORT = 3478;
export const TURN_REALM = 'svc.test';

/** Ranges no relay may reach (an operator's list): loopback, RFC 1918, link-local, CGNAT, multicast, unspecified. */
export const DENIED_PEER_RANGES = [
  '0.0.0.0-0.255.255.255',
  '10.0.0.0-10.255.255.255',
  '100.64.0.0-100.127.255.255',
  '127.0.0.0-127.255.255.255',
  '169.254.0.0-169.254.255.255',
  '172.16.0.0-172.31.255.255',
  '192.168.0.0-192.168.255.255',
  '224.0.0.0-255.255.255.255',
] as const;

export interface TurnCredential {
  readonly username: string;
  readonly credential: string;
}

export interface CoturnOptions {
  /** The shared secret (`static-auth-secret`); random unless given. */
  secret?: string;
  /** `external-ip` (`public` or `public/private`) when the coturn host sits behind a 1:1 NAT. */
  externalIp?: string;
  /** Extra `allowed-peer-ip` entries (ranges `a-b` or single addresses); they win over the denied ones. */
  allowedPeers?: readonly string[];
  /** Relay port range (default 50000-50999: small, so a test can see which ports relayed). */
  minPort?: number;
  maxPort?: number;
  /** How long to wait for the listeners (default 10 s). */
  readyTimeoutMs?: number;
}

export interface Coturn {
  /** `turn:<addr>:3478?transport=udp` and `...?transport=tcp`. */
  readonly urls: { readonly udp: string; readonly tcp: string };
  readonly address: string;
  readonly secret: string;
  readonly realm: string;
  readonly process: GroupProcess;
  /** coturn's output so far (its log). */
  readonly log: string;
  /** A credential valid for `ttlS` seconds from now (a negative ttl: one that expired). */
  credential(ttlS: number, id?: string): TurnCredential;
  /** CPU seconds (user + system) the turnserver process has used so far (/proc/<pid>/stat). */
  cpuSeconds(): Promise<number>;
  close(): Promise<void>;
}

/** The shared-secret credential coturn checks (TURN REST API draft; coturn `use-auth-secret`). */
export function turnCredential(secret: string, ttlS: number, id = 'svc-test', nowMs = Date.now()): TurnCredential {
  const username = `${Math.floor(nowMs / 1000) + Math.round(ttlS)}:${id}`;
  return { username, credential: createHmac('sha1', secret).update(username).digest('base64') };
}

/** Starts coturn in `host` (listening on its first address) and waits until it listens on UDP and TCP 3478. */
export async function startCoturn(network: TestNetwork, host: Host, options: CoturnOptions = {}): Promise<Coturn> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-coturn-'));
  const secret = options.secret ?? randomBytes(18).toString('base64url');
  const address = host.address;
  const lines = [
    `listening-ip=${address}`,
    `relay-ip=${address}`,
    ...(options.externalIp ? [`external-ip=${options.externalIp}`] : []),
    `listening-port=${TURN_PORT}`,
    `min-port=${options.minPort ?? 50_000}`,
    `max-port=${options.maxPort ?? 50_999}`,
    'use-auth-secret',
    `static-auth-secret=${secret}`,
    `realm=${TURN_REALM}`,
    'fingerprint',
    'no-tls',
    'no-dtls',
    'no-cli',
    'no-multicast-peers',
    'no-software-attribute',
    ...DENIED_PEER_RANGES.map((r) => `denied-peer-ip=${r}`),
    ...(options.allowedPeers ?? []).map((r) => `allowed-peer-ip=${r}`),
    'log-file=stdout',
    'simple-log',
    'verbose',
    `pidfile=${join(dir, 'turnserver.pid')}`,
    `userdb=${join(dir, 'turndb')}`,
    'no-rfc5780',
    'no-stun-backward-compatibility',
  ];
  const config = join(dir, 'turnserver.conf');
  writeFileSync(config, lines.join('\n') + '\n');
  const proc = network.spawnProgram(host, ['turnserver', '-c', config]);
  const listening = (proto: 'UDP' | 'TCP') => new RegExp(`${proto} listener opened on\\s*:\\s*${address.replace(/\./g, '\\.')}:${TURN_PORT}`);
  const timeoutMs = options.readyTimeoutMs ?? 10_000;
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`coturn in ${host.name} not listening on UDP and TCP ${address}:${TURN_PORT} after ${timeoutMs} ms:\n${proc.output}`)), timeoutMs);
      const check = () => {
        if (listening('UDP').test(proc.output) && listening('TCP').test(proc.output)) {
          clearTimeout(timer);
          resolve();
        }
      };
      proc.child.stdout!.on('data', check);
      proc.child.stderr!.on('data', check);
      void proc.exited.then((code) => {
        clearTimeout(timer);
        reject(new Error(`coturn in ${host.name} exited (${code}) before it listened:\n${proc.output}`));
      });
      check();
    });
  } catch (err) {
    proc.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  let closed = false;
  return {
    urls: { udp: `turn:${address}:${TURN_PORT}?transport=udp`, tcp: `turn:${address}:${TURN_PORT}?transport=tcp` },
    address,
    secret,
    realm: TURN_REALM,
    process: proc,
    get log() {
      return proc.output;
    },
    credential: (ttlS, id) => turnCredential(secret, ttlS, id),
    cpuSeconds: () => processCpuSeconds(proc.pid),
    async close() {
      if (closed) return;
      closed = true;
      proc.kill('SIGTERM');
      const stopped = await Promise.race([proc.exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 3_000))]);
      if (!stopped) {
        proc.kill('SIGKILL');
        await proc.exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** utime + stime of `pid` in seconds (fields 14 and 15 of /proc/<pid>/stat, in clock ticks of 1/100 s). */
export async function processCpuSeconds(pid: number): Promise<number> {
  const { readFile } = await import('node:fs/promises');
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

export type AllocateResult =
  | { readonly ok: true; readonly relayed: string }
  | { readonly ok: false; readonly code: number; readonly reason: string }
  | { readonly ok: false; readonly code: 0; readonly reason: 'timeout' };

/**
 * A TURN Allocate (RFC 5766) with long-term credentials, over UDP, from inside `from`: the first
 * request is answered 401 with the realm and a nonce, the second carries USERNAME, REALM, NONCE and
 * MESSAGE-INTEGRITY. Returns the relayed address, or the error code coturn answered (401: refused
 * credentials). A granted allocation is released at once (Refresh, lifetime 0).
 */
export async function turnAllocate(from: Host, turn: { address: string; port?: number }, credential: TurnCredential): Promise<AllocateResult> {
  const input = JSON.stringify({ address: turn.address, port: turn.port ?? TURN_PORT, ...credential });
  const out = await from.exec([process.execPath, '-e', ALLOCATE_CLIENT, input]);
  return JSON.parse(out.trim().split('\n').pop()!) as AllocateResult;
}

/** Plain JavaScript run with `node -e` inside a namespace (see turnAllocate). */
const ALLOCATE_CLIENT = `
const dgram = require('node:dgram');
const crypto = require('node:crypto');
const { address, port, username, credential } = JSON.parse(process.argv[1]);
const COOKIE = 0x2112a442;
const attr = (type, value) => {
  const pad = (4 - (value.length % 4)) % 4;
  const b = Buffer.alloc(4 + value.length + pad);
  b.writeUInt16BE(type, 0); b.writeUInt16BE(value.length, 2); value.copy(b, 4);
  return b;
};
function message(type, attrs, key) {
  const tx = crypto.randomBytes(12);
  let body = Buffer.concat(attrs);
  const header = (len) => { const h = Buffer.alloc(20); h.writeUInt16BE(type, 0); h.writeUInt16BE(len, 2); h.writeUInt32BE(COOKIE, 4); tx.copy(h, 8); return h; };
  if (key) {
    const mac = crypto.createHmac('sha1', key).update(Buffer.concat([header(body.length + 24), body])).digest();
    body = Buffer.concat([body, attr(0x0008, mac)]);
  }
  return { tx, bytes: Buffer.concat([header(body.length), body]) };
}
function parse(b) {
  const out = { type: b.readUInt16BE(0), tx: b.subarray(8, 20), attrs: {} };
  let i = 20;
  while (i + 4 <= b.length) {
    const t = b.readUInt16BE(i), l = b.readUInt16BE(i + 2);
    out.attrs[t] = b.subarray(i + 4, i + 4 + l);
    i += 4 + l + ((4 - (l % 4)) % 4);
  }
  return out;
}
const socket = dgram.createSocket('udp4');
function ask(m) {
  return new Promise((resolve) => {
    const timer = setTimeout(() => { socket.off('message', on); resolve(null); }, 3000);
    const on = (data) => { const r = parse(data); if (r.tx.equals(m.tx)) { clearTimeout(timer); socket.off('message', on); resolve(r); } };
    socket.on('message', on);
    socket.send(m.bytes, port, address);
  });
}
const transport = attr(0x0019, Buffer.from([17, 0, 0, 0]));
const error = (r) => { const e = r.attrs[0x0009]; return e ? { code: e[2] * 100 + e[3], reason: e.subarray(4).toString() } : { code: -1, reason: 'no ERROR-CODE' }; };
function xorAddress(v) {
  const p = v.readUInt16BE(2) ^ (COOKIE >>> 16);
  const a = v.readUInt32BE(4) ^ COOKIE;
  return [a >>> 24, (a >>> 16) & 255, (a >>> 8) & 255, a & 255].join('.') + ':' + p;
}
(async () => {
  const first = await ask(message(0x0003, [transport]));
  if (!first) return { ok: false, code: 0, reason: 'timeout' };
  if (first.type !== 0x0113 || error(first).code !== 401) return { ok: false, ...error(first) };
  const realm = first.attrs[0x0014], nonce = first.attrs[0x0015];
  const key = crypto.createHash('md5').update(username + ':' + realm.toString() + ':' + credential).digest();
  const auth = [attr(0x0006, Buffer.from(username)), attr(0x0014, realm), attr(0x0015, nonce)];
  const second = await ask(message(0x0003, [transport, ...auth], key));
  if (!second) return { ok: false, code: 0, reason: 'timeout' };
  if (second.type !== 0x0103) return { ok: false, ...error(second) };
  const relayed = xorAddress(second.attrs[0x0016]);
  await ask(message(0x0004, [attr(0x000d, Buffer.from([0, 0, 0, 0])), ...auth], key));
  return { ok: true, relayed };
})().then((r) => { console.log(JSON.stringify(r)); socket.close(); });
`;

