/**
 * The test-host harness does what the multi-host tests rely on: hosts on a segment reach each
 * other, a host behind a masquerading router reaches out but is not reachable from outside, a 1:1
 * mapped address reaches the private host behind it, a host whose links are down is gone, the
 * test process reaches hosts through its root link, and closing removes every namespace.
 */
import test from 'ava';
import { execFileSync } from 'node:child_process';
import net from 'node:net';
import { canMakeTestHosts, TestNetwork, type Host } from './netns.ts';

const ECHO_SERVER = `
const net = require('node:net');
const [host, port] = process.argv.slice(1);
net.createServer((s) => s.on('data', (d) => s.end('echo:' + d))).listen(Number(port), host, () => console.log('listening'));
`;

/** One TCP exchange from inside `from` to host:port: the reply, or the failure's text. */
async function tcpFrom(from: Host, host: string, port: number): Promise<string> {
  const client = `
const s = require('node:net').connect(${port}, '${host}');
s.setTimeout(1500, () => { console.log('timeout'); process.exit(0); });
s.on('error', (e) => { console.log('error ' + e.code); process.exit(0); });
s.on('data', (d) => { console.log(String(d)); process.exit(0); });
s.write('hi');`;
  return (await from.exec([process.execPath, '-e', client])).trim();
}

const available = await canMakeTestHosts();

test('hosts, NAT, 1:1 mapping, cut links, the root link and cleanup', async (t) => {
  if (!available) {
    // Needs root and iproute2; the CI machine has both (the pretest checks `ip`).
    t.fail('test hosts need root and iproute2 (ip netns)');
    return;
  }
  t.timeout(60_000);
  const network = await TestNetwork.create();
  t.teardown(() => network.close());

  const lan = await network.segment('lan');
  const internet = await network.segment('internet', '198.51.100');
  const home = await network.segment('home', '192.168.7');
  const cloud = await network.segment('cloud', '172.20.5');

  const a = await network.host('a', { links: [{ segment: lan }] });
  const b = await network.host('b', { links: [{ segment: lan }] });
  const homeRouter = await network.host('homegw', { links: [{ segment: home, host: 1 }, { segment: internet, host: 10 }], router: true });
  const visitor = await network.host('visitor', { links: [{ segment: home }], gateway: '192.168.7.1' });
  const cloudRouter = await network.host('cloudgw', { links: [{ segment: cloud, host: 1 }, { segment: internet, host: 20 }], router: true });
  const server = await network.host('server', { links: [{ segment: cloud }], gateway: '172.20.5.1' });
  const outsider = await network.host('outsider', { links: [{ segment: internet, host: 99 }] });
  await network.masquerade(homeRouter, internet);
  await network.mapOneToOne(cloudRouter, internet, '198.51.100.21', server.address);

  const echo = (host: Host, port: number) => {
    const p = network.spawnProgram(host, [process.execPath, '-e', ECHO_SERVER, host.address, String(port)]);
    return new Promise<void>((resolve, reject) => {
      p.child.stdout!.on('data', () => resolve());
      void p.exited.then((code) => reject(new Error(`echo server in ${host.name} exited ${code}: ${p.output}`)));
    });
  };
  await Promise.all([echo(b, 7001), echo(server, 7002), echo(visitor, 7003)]);

  t.is(await tcpFrom(a, b.address, 7001), 'echo:hi', 'hosts on one segment reach each other');
  t.not(await tcpFrom(a, '127.0.0.1', 7001), 'echo:hi', "a host's loopback is its own");
  t.is(await tcpFrom(visitor, '198.51.100.21', 7002), 'echo:hi', 'the visitor behind the NAT reaches the 1:1 mapped server');
  t.is(await tcpFrom(outsider, '198.51.100.21', 7002), 'echo:hi', 'the mapped public address reaches the private server');
  t.not(await tcpFrom(outsider, visitor.address, 7003), 'echo:hi', 'the private address behind the home router is not routable from outside');
  t.not(await tcpFrom(outsider, '198.51.100.10', 7003), 'echo:hi', 'nothing comes in through the home router unasked');

  const before = visitor.address;
  const moved = await network.readdress(visitor, home);
  t.not(moved, before);
  t.is(visitor.address, moved, 'a readdressed host reports its new address');
  t.false((await visitor.exec(['ip', '-4', 'addr', 'show'])).includes(`${before}/`), 'the old address is gone');
  t.is(await tcpFrom(visitor, '198.51.100.21', 7002), 'echo:hi', 'and it reaches out from the new one');

  await network.setLinks(b, false);
  t.not(await tcpFrom(a, b.address, 7001), 'echo:hi', 'a host whose links are down is gone');
  await network.setLinks(b, true);
  t.is(await tcpFrom(a, b.address, 7001), 'echo:hi', 'and back when they are up');

  const rootAddress = await network.rootLink(lan);
  const reply = await new Promise<string>((resolve, reject) => {
    const s = net.connect(7001, b.address);
    s.on('error', reject);
    s.on('data', (d) => resolve(String(d)));
    s.write('root');
  });
  t.is(reply, 'echo:root', 'the test process reaches the hosts through its root link');
  t.regex(rootAddress, /^10\.\d+\.1\.\d+$/);

  await network.close();
  const left = execFileSync('ip', ['netns', 'list']).toString();
  t.false(left.includes(network.id), 'closing removes every namespace of the network');
});
