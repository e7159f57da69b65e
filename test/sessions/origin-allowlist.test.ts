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

test('null, userinfo, paths, queries, fragments, other schemes and lists of origins are refused', (t) => {
  const tricks = [
    'null', '', ' ', 'https://example.com/', 'https://example.com/path', 'https://example.com?x=1', 'https://example.com#f',
    'https://user@example.com', 'https://user:pw@example.com', 'https://evil.net@example.com', 'https://example.com@evil.net',
    'ftp://example.com', 'file://example.com', 'javascript://example.com', 'example.com', '//example.com',
    'https://example.com, https://evil.net', 'https://example.com https://evil.net', 'https://exam ple.com',
    'https://example.com\\@evil.net', 'https://%65xample.com', 'https://example.com:99999',
  ];
  for (const origin of tricks) {
    t.false(allow(['example.com'], origin), origin);
    // `*` admits any origin, but not something that is not an origin at all.
    t.false(allow(['*'], origin), `* ${origin}`);
  }
});

test('originHostname reads only plain origins', (t) => {
  t.is(originHostname('https://Example.com:443'), 'example.com');
  t.is(originHostname('http://[::1]:80'), '::1');
  t.is(originHostname('https://example.com/'), null);
  t.is(originHostname('null'), null);
});
