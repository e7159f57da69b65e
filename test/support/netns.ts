/**
 * Test hosts: a network of Linux network namespaces made by one test file and removed by it, so
 * that multi-machine behaviour (a fleet of runners, a visitor behind a NAT) is tested across
 * real interfaces, routes and packet filters, on one machine.
 *
 * - A segment is a Linux bridge (one "switch" namespace holds every bridge of the network).
 * - A host is a namespace with one veth link per segment it joins, its loopback up (a namespace's
 *   loopback is its own: an accidental 127.0.0.1 cannot reach another host), a default route when
 *   a gateway is given, and IP forwarding when it is a router.
 * - `rootLink` gives the test process itself (the root namespace) an address on a segment, so that
 *   a relay in the test process can bring PostgreSQL (which listens on 127.0.0.1) to the hosts
 *   without touching the machine's own PostgreSQL.
 *
 * Needs root and iproute2 (plus iptables for NAT and drops). Names carry the creating pid, and a
 * network left behind by a killed test run is swept by the next one whose pid check finds its
 * creator gone. Addresses: rootLink segments take a random 10.x/16 so that test files running at
 * once never clash in the root namespace; other segments may use any prefix (namespaces isolate
 * them), e.g. documentation ranges for "public" addresses.
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { spawnEntryPoint, type GroupProcess } from './process-group.ts';

const run = promisify(execFile);
const PREFIX = 'svct';

export interface Segment {
  readonly name: string;
  /** The first three octets, e.g. `10.57.1`: hosts get `${prefix}.${n}`. */
  readonly prefix: string;
  readonly bridge: string;
}

export interface Link {
  readonly segment: Segment;
  /** Interface name inside the host (`eth0`, `eth1`, ...). */
  readonly iface: string;
  readonly address: string;
}

export interface Host {
  readonly name: string;
  /** The namespace's name (`ip netns exec <ns> ...`). */
  readonly ns: string;
  readonly links: readonly Link[];
  /** The address of its first link. */
  readonly address: string;
  /** The address it has on `segment`. */
  addressOn(segment: Segment): string;
  /** Runs a command in the host; rejects with its stderr when it fails. */
  exec(argv: readonly string[]): Promise<string>;
}

export interface HostOptions {
  /** One entry per segment joined; `host` is the last octet (default: the next free one). */
  links: readonly { segment: Segment; host?: number }[];
  /** Default route through this address (on one of the host's segments). */
  gateway?: string;
  /** IP forwarding on (a router). */
  router?: boolean;
}

/** Whether this process can make test hosts (root with iproute2). */
export async function canMakeTestHosts(): Promise<boolean> {
  if (process.getuid?.() !== 0) return false;
  try {
    await run('ip', ['netns', 'list']);
    return true;
  } catch {
    return false;
  }
}

/** Deletes namespaces left by test processes that no longer exist. */
async function sweepStaleNetworks(): Promise<void> {
  const { stdout } = await run('ip', ['netns', 'list']);
  for (const line of stdout.split('\n')) {
    const name = line.split(' ')[0] ?? '';
    const m = new RegExp(`^${PREFIX}-(\\d+)-`).exec(name);
    if (!m) continue;
    const pid = Number(m[1]);
    let alive = true;
    try {
      process.kill(pid, 0);
    } catch {
      alive = false;
    }
    if (!alive) await removeNamespace(name);
  }
}

/** Kills whatever still runs in `ns`, then deletes it. */
async function removeNamespace(ns: string): Promise<void> {
  const pids = await run('ip', ['netns', 'pids', ns]).then(({ stdout }) => stdout.split(/\s+/).filter(Boolean).map(Number), () => [] as number[]);
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone meanwhile
    }
  }
  await run('ip', ['netns', 'del', ns]).catch(() => undefined);
}

export class TestNetwork {
  private readonly namespaces: string[] = [];
  private readonly segments = new Map<string, Segment>();
  /** Last octets in use on each segment. */
  private readonly used = new Map<Segment, Set<number>>();
  private readonly gateways = new Map<string, string>();
  private readonly processes = new Set<GroupProcess>();
  private readonly scratch: string;
  private linkCounter = 0;
  private segmentCounter = 0;
  private readonly switchNs: string;
  /** Second octet of the 10.x/16 this network's root-linked segments use. */
  private readonly octet: number;
  private closed = false;

  private constructor(readonly id: string) {
    this.switchNs = `${PREFIX}-${id}-sw`;
    this.octet = 64 + (randomBytes(1)[0]! % 160);
    this.scratch = mkdtempSync(join(tmpdir(), 'svc-netns-'));
  }

  static async create(): Promise<TestNetwork> {
    await sweepStaleNetworks();
    const net = new TestNetwork(`${process.pid}-${randomBytes(2).toString('hex')}`);
    await net.addNamespace(net.switchNs);
    return net;
  }

  private async addNamespace(ns: string): Promise<void> {
    await run('ip', ['netns', 'add', ns]);
    this.namespaces.push(ns);
    await run('ip', ['-n', ns, 'link', 'set', 'lo', 'up']);
  }

  /**
   * A segment (a bridge). `prefix` defaults to `10.<this network's octet>.<n>`; pass one (three
   * octets) for a segment that never touches the root namespace, e.g. `198.51.100` for "the internet".
   */
  async segment(name: string, prefix?: string): Promise<Segment> {
    const n = ++this.segmentCounter;
    const segment: Segment = { name, prefix: prefix ?? `10.${this.octet}.${n}`, bridge: `br${n}` };
    await run('ip', ['-n', this.switchNs, 'link', 'add', segment.bridge, 'type', 'bridge']);
    await run('ip', ['-n', this.switchNs, 'link', 'set', segment.bridge, 'up']);
    this.segments.set(name, segment);
    this.used.set(segment, new Set([0, 1, 255]));
    return segment;
  }

  /** An address on `segment`: `host` as its last octet (.1 is free for a router), else the lowest free one from .2. */
  private allocate(segment: Segment, host?: number): string {
    const used = this.used.get(segment)!;
    let n = host ?? 2;
    if (host === undefined) while (used.has(n)) n++;
    else if (host !== 1 && used.has(host)) throw new Error(`${segment.prefix}.${host} is already taken on ${segment.name}`);
    if (n > 254) throw new Error(`segment ${segment.name} is full`);
    used.add(n);
    return `${segment.prefix}.${n}`;
  }

  /** A veth from `ns` (named `iface` there) to the segment's bridge, with `address`/24. */
  private async plug(ns: string | null, iface: string, segment: Segment, address: string): Promise<void> {
    const port = `p${++this.linkCounter}`;
    const temp = `svc${this.id.replace(/\D/g, '').slice(-6)}${this.linkCounter}`.slice(0, 15);
    const inside = ns ? iface : temp;
    await run('ip', ['link', 'add', temp, ...(ns ? ['netns', ns] : []), 'type', 'veth', 'peer', 'name', port, 'netns', this.switchNs]);
    if (ns && inside !== temp) await run('ip', ['-n', ns, 'link', 'set', temp, 'name', inside]);
    const ip = (args: string[]) => run('ip', ns ? ['-n', ns, ...args] : args);
    await ip(['addr', 'add', `${address}/24`, 'dev', inside]);
    await ip(['link', 'set', inside, 'up']);
    await run('ip', ['-n', this.switchNs, 'link', 'set', port, 'master', segment.bridge]);
    await run('ip', ['-n', this.switchNs, 'link', 'set', port, 'up']);
  }

  async host(name: string, options: HostOptions): Promise<Host> {
    const ns = `${PREFIX}-${this.id}-${name}`;
    await this.addNamespace(ns);
    const links: Link[] = [];
    for (const [i, { segment, host }] of options.links.entries()) {
      const link: Link = { segment, iface: `eth${i}`, address: this.allocate(segment, host) };
      await this.plug(ns, link.iface, segment, link.address);
      links.push(link);
    }
    if (options.gateway) {
      await run('ip', ['-n', ns, 'route', 'add', 'default', 'via', options.gateway]);
      this.gateways.set(ns, options.gateway);
    }
    if (options.router) await run('ip', ['netns', 'exec', ns, 'sysctl', '-qw', 'net.ipv4.ip_forward=1']);
    return {
      name,
      ns,
      links,
      // A getter: readdress() replaces a link's address.
      get address() {
        return links[0]!.address;
      },
      addressOn(segment) {
        const link = links.find((l) => l.segment === segment);
        if (!link) throw new Error(`host ${name} is not on segment ${segment.name}`);
        return link.address;
      },
      exec: async (argv) => (await run('ip', ['netns', 'exec', ns, ...argv])).stdout,
    };
  }

  /**
   * Gives the test process (root namespace) an address on `segment` (a `10.x` one made by this
   * network) and returns it: a relay listening there serves the hosts of that segment.
   */
  async rootLink(segment: Segment): Promise<string> {
    const address = this.allocate(segment);
    await this.plug(null, '', segment, address);
    return address;
  }

  /** Routes in `host` to `destination` (a CIDR) via `gateway`. */
  async route(host: Host, destination: string, gateway: string): Promise<void> {
    await host.exec(['ip', 'route', 'add', destination, 'via', gateway]);
  }

  /** The router `router` hides the hosts behind it: source NAT to its address on `outside`, and
   * nothing comes in from `outside` that the inside did not start (a home router). */
  async masquerade(router: Host, outside: Segment): Promise<void> {
    const out = router.links.find((l) => l.segment === outside)!.iface;
    await router.exec(['iptables', '-t', 'nat', '-A', 'POSTROUTING', '-o', out, '-j', 'MASQUERADE']);
    await router.exec(['iptables', '-A', 'FORWARD', '-i', out, '-m', 'conntrack', '--ctstate', 'ESTABLISHED,RELATED', '-j', 'ACCEPT']);
    await router.exec(['iptables', '-A', 'FORWARD', '-i', out, '-j', 'DROP']);
  }

  /** 1:1 NAT on `router`: `publicAddress` (added to its `outside` link) is `privateAddress` inside. */
  async mapOneToOne(router: Host, outside: Segment, publicAddress: string, privateAddress: string): Promise<void> {
    const out = router.links.find((l) => l.segment === outside)!.iface;
    if (!publicAddress.startsWith(`${outside.prefix}.`)) throw new Error(`${publicAddress} is not on ${outside.name}`);
    this.allocate(outside, Number(publicAddress.split('.')[3]));
    await router.exec(['ip', 'addr', 'add', `${publicAddress}/24`, 'dev', out]);
    await router.exec(['iptables', '-t', 'nat', '-A', 'PREROUTING', '-d', publicAddress, '-j', 'DNAT', '--to-destination', privateAddress]);
    await router.exec(['iptables', '-t', 'nat', '-A', 'POSTROUTING', '-s', privateAddress, '-o', out, '-j', 'SNAT', '--to-source', publicAddress]);
  }

  /**
   * Moves `host` to another address on `segment` (`host` as its last octet, else the lowest free
   * one): the old address is removed, so sockets bound to it are dead, as when a laptop changes
   * networks. Its default route is put back. Returns the new address.
   */
  async readdress(host: Host, segment: Segment, octet?: number): Promise<string> {
    const links = host.links as Link[];
    const i = links.findIndex((l) => l.segment === segment);
    if (i < 0) throw new Error(`host ${host.name} is not on segment ${segment.name}`);
    const old = links[i]!;
    const address = this.allocate(segment, octet);
    // Deleted first: deleting a primary address also deletes the secondaries of its subnet.
    await host.exec(['ip', 'addr', 'del', `${old.address}/24`, 'dev', old.iface]);
    await host.exec(['ip', 'addr', 'add', `${address}/24`, 'dev', old.iface]);
    this.used.get(segment)!.delete(Number(old.address.split('.')[3]));
    links[i] = { ...old, address };
    const gateway = this.gateways.get(host.ns);
    if (gateway) await host.exec(['ip', 'route', 'replace', 'default', 'via', gateway]);
    return address;
  }

  /** Takes every link of `host` down (the machine is gone from the network) or back up. */
  async setLinks(host: Host, up: boolean): Promise<void> {
    for (const link of host.links) await host.exec(['ip', 'link', 'set', link.iface, up ? 'up' : 'down']);
    // Addresses survive a link flap, the routes through it do not.
    const gateway = this.gateways.get(host.ns);
    if (up && gateway) await host.exec(['ip', 'route', 'replace', 'default', 'via', gateway]);
  }

  /** A TypeScript entry point of this repository run inside `host`, in a process group of its own. */
  spawnEntryPoint(host: Host, entry: string, env: Record<string, string>, isReady: (output: string) => boolean, what: string): { readonly process: GroupProcess; readonly ready: Promise<void> } {
    const started = spawnEntryPoint(entry, env, isReady, `${what} (in ${host.name})`, ['ip', 'netns', 'exec', host.ns]);
    this.processes.add(started.process);
    void started.process.exited.then(() => this.processes.delete(started.process));
    return started;
  }

  /** A program (not ours: coturn, chromium) inside `host`, in a process group of its own. */
  spawnProgram(host: Host, argv: readonly string[]): GroupProcess {
    // setpriv: the program is killed when the test process dies, however it dies.
    const child = spawn('ip', ['netns', 'exec', host.ns, 'setpriv', '--pdeathsig', 'KILL', '--', ...argv], { detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const handle: GroupProcess = {
      child,
      pid: child.pid!,
      get output() {
        return output;
      },
      exited,
      kill(signal) {
        try {
          process.kill(-child.pid!, signal);
        } catch {
          // already gone
        }
      },
    };
    this.processes.add(handle);
    void exited.then(() => this.processes.delete(handle));
    return handle;
  }

  /** An executable that runs `program` inside `host` (for launchers that take a path: playwright's chromium). */
  wrapper(host: Host, program: string): string {
    const path = join(this.scratch, `${host.name}-${program.split('/').pop()}`);
    writeFileSync(path, `#!/bin/sh\nexec ip netns exec ${host.ns} ${program} "$@"\n`);
    chmodSync(path, 0o755);
    return path;
  }

  /** Kills every process started in the network, then removes its namespaces (and with them every link). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const p of this.processes) p.kill('SIGKILL');
    await Promise.all([...this.processes].map((p) => p.exited));
    for (const ns of this.namespaces.reverse()) await removeNamespace(ns);
    rmSync(this.scratch, { recursive: true, force: true });
  }
}
