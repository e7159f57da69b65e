import test from 'ava';
import { checkOrigin, originHostname } from '../../server/sessions/origin-allowlist.ts';

const allow = (list: string[] | null, origin: string | undefined) => checkOrigin(list, origin).allowed;

test('an exact hostname match admits, case-insensitively, on any scheme and port', (t) => {
  t.true(allow(['shop.example.com'], 'https://shop.example.com'));
  t.true(allow(['Shop.Example.COM'], 'https://SHOP.example.com:8443'));
  t.true(allow(['localhost'], 'http://localhost:5173'));
  t.true(allow(['127.0.0.1'], 'http://127.0.0.1:8080'));
  t.true(allow(['[::1]'], 'http://[::1]:8080'));
  t.true(allow(['::1'], 'http://[::1]'));
});

test('no subdomain, parent, prefix or suffix inference', (t) => {
  t.false(allow(['example.com'], 'https://shop.example.com'));
  t.false(allow(['shop.example.com'], 'https://example.com'));
  t.false(allow(['example.com'], 'https://example.com.evil.net'));
  t.false(allow(['example.com'], 'https://evilexample.com'));
  t.false(allow(['example.com'], 'https://example.co'));
  t.false(allow(['example.com'], 'https://example.com.'));
});

test('an empty or absent allowlist refuses everyone, with or without an Origin', (t) => {
  for (const list of [null, [], ['  ']]) {
    t.false(allow(list, 'https://example.com'));
    t.false(allow(list, undefined));
  }
});

test('`*` admits any well-formed origin and requests without Origin; nothing else admits a missing Origin', (t) => {
  t.true(allow(['*'], 'https://anything.example'));
  t.true(allow(['*'], undefined));
  t.true(allow(['example.com', '*'], undefined));
  t.false(allow(['example.com'], undefined));
});

test('userinfo, paths, queries, fragments, lists and non-canonical hosts are not origins: refused, even by `*`', (t) => {
  const tricks = [
    '', ' ', 'https://example.com/', 'https://example.com/path', 'https://example.com?x=1', 'https://example.com#f',
    'https://user@example.com', 'https://user:pw@example.com', 'https://evil.net@example.com', 'https://example.com@evil.net',
    'example.com', '//example.com', 'chrome-extension://abc/page', 'chrome-extension://a@b', 'Null', 'null, null',
    'https://example.com, https://evil.net', 'https://example.com https://evil.net', 'https://exam ple.com',
    'https://example.com\\@evil.net', 'https://%65xample.com', 'https://example.com:99999',
  ];
  for (const origin of tricks) {
    t.false(allow(['example.com'], origin), origin);
    // `*` admits any origin, but not something that is not an origin at all.
    t.false(allow(['*'], origin), `* ${origin}`);
  }
});

test('`*` admits every origin, as the spec says: the opaque null (sandboxed frames, file: pages) and other schemes; a hostname list admits none of them', (t) => {
  for (const origin of ['null', 'chrome-extension://abcdefghijklmnop', 'moz-extension://4b1f0c2e-1d2a-4f5b-9c3d-7e8f9a0b1c2d', 'ftp://example.com', 'file://example.com']) {
    t.true(allow(['*'], origin), `* ${origin}`);
    t.deepEqual(checkOrigin(['*'], origin), { allowed: true, hostname: null }, origin);
    t.false(allow(['example.com'], origin), origin);
  }
});

test('originHostname reads only plain origins', (t) => {
  t.is(originHostname('https://Example.com:443'), 'example.com');
  t.is(originHostname('http://[::1]:80'), '::1');
  t.is(originHostname('https://example.com/'), null);
  t.is(originHostname('null'), null);
});
