import test from 'ava';
import { AddressPolicy, AddressPolicyError } from '../../processors/tools/address-policy.ts';
import { until } from '../../testing/until.ts';
import {
  createSystemResolver,
  resolveWebhookTarget,
  systemResolver,
  WebhookRefusedError,
  type HostResolver,
  type ResolvedAddress,
} from '../../processors/tools/webhook-target.ts';

/** Names the tests control; `localhost` goes to the real system resolver (/etc/hosts). */
const ZONE: Readonly<Record<string, readonly ResolvedAddress[]>> = {
  'public.test': [{ address: '93.184.216.34', family: 4 }],
  'internal.test': [{ address: '10.0.0.5', family: 4 }],
  'mixed.test': [
    { address: '93.184.216.34', family: 4 },
    { address: '127.0.0.1', family: 4 },
  ],
  'ula.test': [{ address: 'fd00::1', family: 6 }],
  'mapped.test': [{ address: '::ffff:10.0.0.1', family: 6 }],
  'metadata.test': [{ address: '169.254.169.254', family: 4 }],
};

const resolver: HostResolver = async (hostname) => {
  if (hostname === 'localhost' || hostname === 'localhost.') return systemResolver(hostname);
  const answer = ZONE[hostname];
  if (!answer) throw Object.assign(new Error(`ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
  return answer;
};

type RefusalCode = WebhookRefusedError['code'];

/** [url, why, expected refusal code(s) (default forbidden_address)] */
const HOSTILE: readonly (readonly [string, string, (RefusalCode | readonly RefusalCode[])?])[] = [
  ['http://127.0.0.1/', 'loopback'],
  ['http://localhost/', 'loopback by name (system resolver)'],
  // Some resolvers answer `localhost.` from /etc/hosts, others do not: refused either way.
  ['http://localhost./', 'loopback by name with trailing dot', ['forbidden_address', 'unresolvable_host']],
  ['http://2130706433/', 'decimal IPv4 spelling of 127.0.0.1'],
  ['http://0177.0.0.1/', 'octal IPv4 spelling'],
  ['http://0x7f.0.0.1/', 'hex first octet'],
  ['http://0x7f000001/', 'single hex number'],
  ['http://017700000001/', 'single octal number'],
  ['http://127.1/', 'short IPv4 form'],
  ['http://0x7f.1/', 'short hex form'],
  ['http://127.000.000.001/', 'zero-padded octets'],
  ['http://%31%32%37.0.0.1/', 'percent-encoded host'],
  ['http://127\u30020\u30020\u30021/', 'ideographic full stops'],
  ['http://127.0.0.1./', 'trailing dot'],
  ['http://user:pw@127.0.0.1:8080/x', 'credentials and port in front of loopback'],
  ['http://public.test@127.0.0.1/', 'public name as userinfo in front of loopback'],
  ['http://127.0.0.1#@public.test/', 'public name hidden in the fragment'],
  ['http://0x7f.0x0.0x0.0x1/', 'every octet in hex'],
  ['HTTP://LOCALHOST/', 'upper-case scheme and loopback name'],
  ['http://100.100.100.200/', 'Alibaba Cloud metadata (CGNAT range)'],
  ['http://[fd00:ec2::254]/', 'AWS IPv6 metadata (unique local)'],
  ['http://[fec0::1]/', 'IPv6 site-local'],
  ['http://[100::1]/', 'IPv6 discard-only'],
  ['http://0.0.0.0/', 'unspecified'],
  ['http://0/', 'unspecified, short'],
  ['http://10.0.0.1/', 'RFC 1918 10/8'],
  ['http://172.16.5.4/', 'RFC 1918 172.16/12'],
  ['http://192.168.1.1/', 'RFC 1918 192.168/16'],
  ['http://169.254.169.254/latest/meta-data/', 'link-local cloud metadata'],
  ['http://100.64.0.1/', 'carrier-grade NAT'],
  ['http://224.0.0.1/', 'multicast'],
  ['http://255.255.255.255/', 'broadcast'],
  ['http://198.18.0.1/', 'benchmarking'],
  ['http://192.0.2.1/', 'documentation'],
  ['http://240.0.0.1/', 'reserved class E'],
  ['http://[::1]/', 'IPv6 loopback'],
  ['http://[::]/', 'IPv6 unspecified'],
  ['http://[fe80::1]/', 'IPv6 link-local'],
  ['http://[fd12:3456::1]/', 'IPv6 unique local'],
  ['http://[ff02::1]/', 'IPv6 multicast'],
  ['http://[2001:db8::1]/', 'IPv6 documentation'],
  ['http://[::ffff:127.0.0.1]/', 'IPv4-mapped loopback'],
  ['http://[0:0:0:0:0:ffff:7f00:1]/', 'IPv4-mapped loopback, long form'],
  ['http://[::ffff:a9fe:a9fe]/', 'IPv4-mapped metadata address'],
  ['http://[::ffff:0:7f00:1]/', 'IPv4-translated loopback'],
  ['http://[::127.0.0.1]/', 'IPv4-compatible loopback'],
  ['http://[64:ff9b::7f00:1]/', 'NAT64 of loopback'],
  ['http://[64:ff9b::10.0.0.1]/', 'NAT64 of RFC 1918'],
  ['http://[64:ff9b:1::808:808]/', 'local-use NAT64 prefix'],
  ['http://[2002:7f00:1::]/', '6to4 embedding loopback'],
  ['http://[2002:c0a8:101::1]/', '6to4 embedding 192.168.1.1'],
  ['http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/', 'Teredo whose client is 127.0.0.1'],
  ['http://internal.test/', 'name resolving to RFC 1918'],
  ['http://mixed.test/', 'name resolving to a public and a loopback address'],
  ['http://ula.test/', 'name resolving to IPv6 unique local'],
  ['http://mapped.test/', 'name resolving to IPv4-mapped private'],
  ['http://metadata.test/', 'name resolving to link-local metadata'],
  ['http://nowhere.test/', 'name that does not resolve', 'unresolvable_host'],
  ['file:///etc/passwd', 'file scheme', 'unsupported_scheme'],
  ['ftp://public.test/', 'ftp scheme', 'unsupported_scheme'],
  ['gopher://public.test:25/', 'gopher scheme', 'unsupported_scheme'],
  ['javascript:alert(1)', 'javascript scheme', 'unsupported_scheme'],
  ['data:text/plain,hello', 'data scheme', 'unsupported_scheme'],
  ['ws://public.test/', 'websocket scheme', 'unsupported_scheme'],
  ['http://[fe80::1%25eth0]/', 'IPv6 zone id', 'invalid_url'],
  ['not a url', 'not a URL', 'invalid_url'],
  ['http://1.2.3.4.5/', 'malformed IPv4', 'invalid_url'],
];

test('the hostile URL table has at least 30 entries', (t) => {
  t.true(HOSTILE.length >= 30);
});

for (const [url, why, code = 'forbidden_address'] of HOSTILE) {
  test(`refuses ${why}: ${url}`, async (t) => {
    const err = await t.throwsAsync(resolveWebhookTarget(url, new AddressPolicy(), resolver), {
      instanceOf: WebhookRefusedError,
    });
    t.true((typeof code === 'string' ? [code] : code).includes(err!.code), `${err!.code}: ${err!.message}`);
  });
}

const PUBLIC: readonly (readonly [string, string])[] = [
  ['http://93.184.216.34/hook', '93.184.216.34'],
  ['https://public.test:8443/hook?x=1', '93.184.216.34'],
  ['http://[2606:4700::1111]/', '2606:4700::1111'],
  ['http://[64:ff9b::808:808]/', '64:ff9b::808:808'],
  ['http://[::ffff:8.8.8.8]/', '::ffff:808:808'],
];

for (const [url, address] of PUBLIC) {
  test(`accepts public target ${url}`, async (t) => {
    const target = await resolveWebhookTarget(url, new AddressPolicy(), resolver);
    t.is(target.address, address);
    t.is(target.url.href, new URL(url).href);
  });
}

test('odd IPv4 spellings are refused as the loopback address they normalise to', async (t) => {
  for (const url of ['http://2130706433/', 'http://0177.0.0.1/', 'http://0x7f.1/', 'http://127.1/']) {
    const err = await t.throwsAsync(resolveWebhookTarget(url, new AddressPolicy(), resolver));
    t.regex(err!.message, /^127\.0\.0\.1 is refused: loopback/, url);
  }
});

test('a name is refused when any one of its addresses is private', async (t) => {
  const err = await t.throwsAsync(resolveWebhookTarget('http://mixed.test/', new AddressPolicy(), resolver));
  t.is((err as WebhookRefusedError).code, 'forbidden_address');
  t.regex(err!.message, /127\.0\.0\.1 \(resolved from mixed\.test\)/);
});

test('an operator range opens exactly that range', async (t) => {
  const policy = new AddressPolicy(['127.0.0.0/8', '10.1.0.0/16']);
  t.true(policy.check('127.0.0.1').allowed);
  t.true(policy.check('10.1.2.3').allowed);
  t.true(policy.check('::ffff:127.0.0.1').allowed, 'mapped form of an opened address');
  t.false(policy.check('10.2.0.1').allowed);
  t.false(policy.check('192.168.1.1').allowed);
  t.false(policy.check('::1').allowed, 'IPv6 loopback is a different range');
  const target = await resolveWebhookTarget('http://localhost:9/hook', policy, resolver);
  t.is(target.address, '127.0.0.1');
  t.is(target.hostname, 'localhost');
});

test('an invalid operator range fails at construction', (t) => {
  const err = t.throws(() => new AddressPolicy(['10.0.0.0/99']), { instanceOf: AddressPolicyError });
  t.is(err!.code, 'invalid_allowed_range');
});

test('system lookups (names DNS does not know): at most two in flight (the rest queue in order), one lookup per name, a full queue refused at once, a stuck name holding no more than its own slot', async (t) => {
  const started: string[] = [];
  const answer = new Map<string, (value: Array<{ address: string; family: number }>) => void>();
  const lookup = (hostname: string) => {
    started.push(hostname);
    return new Promise<Array<{ address: string; family: number }>>((resolve) => answer.set(hostname, resolve));
  };
  // DNS does not know these names (as with hosts-file names): the system's lookup answers.
  const query = async () => {
    throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
  };
  const resolve = createSystemResolver({ query, lookup, maxInFlight: 2, maxQueued: 2 });
  const stuck = resolve('stuck.example'); // its nameserver never answers
  const a = resolve('a.example');
  const b = resolve('b.example');
  const again = resolve('a.example');
  const c = resolve('c.example');
  await t.throwsAsync(resolve('d.example'), { code: 'EBUSY' }, 'two names waiting already');
  await Promise.resolve();
  t.deepEqual(started, ['stuck.example', 'a.example'], 'two lookups in flight');
  answer.get('a.example')!([{ address: '93.184.216.34', family: 4 }]);
  t.deepEqual(await a, [{ address: '93.184.216.34', family: 4 }]);
  t.is(await again, await a, 'the same name asked twice while in flight: one lookup');
  await until(async () => started.length === 3, { timeoutMs: 10_000, intervalMs: 1, what: 'the next name to start' });
  t.deepEqual(started, ['stuck.example', 'a.example', 'b.example'], 'in arrival order, while the stuck one still holds its slot');
  answer.get('b.example')!([{ address: '2001:db8::1', family: 6 }]);
  t.deepEqual(await b, [{ address: '2001:db8::1', family: 6 }]);
  await until(async () => started.length === 4, { timeoutMs: 10_000, intervalMs: 1, what: 'the last name to start' });
  answer.get('c.example')!([]);
  t.deepEqual(await c, []);
  const later = resolve('a.example');
  await until(async () => started.length === 5, { timeoutMs: 10_000, intervalMs: 1, what: 'a new lookup of a name once its last one ended' });
  answer.get('a.example')!([{ address: '93.184.216.35', family: 4 }]);
  t.deepEqual(await later, [{ address: '93.184.216.35', family: 4 }]);
  answer.get('stuck.example')!([]);
  await stuck;
});

test('host lookups go to DNS first: its answer is used, a nameserver that does not answer is not asked again through the system lookup, localhost goes to the system lookup', async (t) => {
  const systemAsked: string[] = [];
  const lookup = async (hostname: string) => {
    systemAsked.push(hostname);
    return [{ address: '127.0.0.1', family: 4 }];
  };
  const query = async (hostname: string): Promise<ResolvedAddress[]> => {
    if (hostname === 'dead.example') throw Object.assign(new Error('timeout'), { code: 'ETIMEOUT' });
    if (hostname === 'hosts-file.example') throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
    return [{ address: '93.184.216.34', family: 4 }, { address: '2606:2800:220:1::1', family: 6 }];
  };
  const resolve = createSystemResolver({ query, lookup });
  t.deepEqual(await resolve('api.example'), [{ address: '93.184.216.34', family: 4 }, { address: '2606:2800:220:1::1', family: 6 }]);
  await t.throwsAsync(resolve('dead.example'), { code: 'ETIMEOUT' });
  t.deepEqual(await resolve('hosts-file.example'), [{ address: '127.0.0.1', family: 4 }]);
  t.deepEqual(await resolve('localhost'), [{ address: '127.0.0.1', family: 4 }]);
  t.deepEqual(systemAsked, ['hosts-file.example', 'localhost'], 'the system lookup only for names DNS does not know');
});

test('the process resolver answers localhost through the system lookup (the hosts file)', async (t) => {
  const answers = await systemResolver('localhost');
  t.true(answers.some((a) => a.address === '127.0.0.1' || a.address === '::1'), JSON.stringify(answers));
});
