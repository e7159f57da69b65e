/**
 * Widget hosting on the real server: the script at /widget/latest and /widget/<version> with
 * their cache headers, CORS, gzip, ETag revalidation and HEAD; the demo page at /; the rest of
 * the server answering as before. Also the bundle's size (logged, documented in docs/widget.md).
 */
import test from 'ava';
import { createHash } from 'node:crypto';
import { gunzipSync } from 'node:zlib';
import { WIDGET_VERSION } from '../../protocol/widget-version.ts';
import { archiveWidgetFile, buildLiveKitModule, buildWidget, WIDGET_CACHE, WIDGET_PATHS } from '../../server/widget/index.ts';
import { until } from '../../testing/until.ts';
import { startTestServer, type TestServer } from '../server/harness.ts';
import { withBrowser } from './browser.ts';

let ts: TestServer;
let demoAgent: string | null = null;

test.before(async () => {
  ts = await startTestServer({ label: 'widget_serving', surfaces: { widget: true }, parts: { widget: { demoAgentId: async () => demoAgent } } });
});

test.after.always(async () => {
  await ts?.stop();
});

test('the latest script: short cache revalidated by ETag, CORS, gzip when accepted', async (t) => {
  const res = await fetch(`${ts.url}/widget/latest/svc-agent.js`, { headers: { 'accept-encoding': 'gzip' } });
  t.is(res.status, 200);
  t.is(res.headers.get('content-encoding'), 'gzip');
  t.is(res.headers.get('content-type'), 'text/javascript; charset=utf-8');
  t.is(res.headers.get('cache-control'), WIDGET_CACHE.latest);
  t.is(res.headers.get('cache-control'), 'public, max-age=300, must-revalidate');
  t.is(res.headers.get('access-control-allow-origin'), '*');
  t.is(res.headers.get('cross-origin-resource-policy'), 'cross-origin');
  t.is(res.headers.get('vary'), 'Accept-Encoding');
  t.is(res.headers.get('x-widget-version'), WIDGET_VERSION);
  const etag = res.headers.get('etag')!;
  t.regex(etag, /^"[A-Za-z0-9_-]{22}-gz"$/, 'the gzip representation has its own strong ETag');
  const script = Buffer.from(await res.arrayBuffer()).toString();
  t.true(script.startsWith(`/* svc-agent ${WIDGET_VERSION}`), 'fetch decoded the gzip body');
  t.true(script.includes('svc-agent'));

  const again = await fetch(`${ts.url}/widget/latest/svc-agent.js`, { headers: { 'if-none-match': etag } });
  t.is(again.status, 304, 'revalidation with the ETag');
  t.is(again.headers.get('cache-control'), WIDGET_CACHE.latest);
  t.is(await again.text(), '');
  const identity = await fetch(`${ts.url}/widget/latest/svc-agent.js`, { headers: { 'accept-encoding': 'identity', 'if-none-match': etag } });
  t.is(identity.status, 200, "the gzip ETag does not confirm the identity representation");
  t.is(identity.headers.get('etag'), etag.replace('-gz"', '"'));
  t.is(identity.headers.get('content-encoding'), null);
  t.is((await fetch(`${ts.url}/widget/latest/svc-agent.js`, { headers: { 'accept-encoding': 'identity', 'if-none-match': identity.headers.get('etag')! } })).status, 304);
});

test('the versioned script is immutable and identical to latest; other versions are not served', async (t) => {
  t.is(WIDGET_PATHS.versioned, `/widget/${WIDGET_VERSION}/svc-agent.js`);
  const [latest, versioned] = await Promise.all([fetch(`${ts.url}${WIDGET_PATHS.latest}`), fetch(`${ts.url}${WIDGET_PATHS.versioned}`)]);
  t.is(versioned.status, 200);
  t.is(versioned.headers.get('cache-control'), 'public, max-age=31536000, immutable');
  t.is(versioned.headers.get('access-control-allow-origin'), '*');
  t.is(versioned.headers.get('etag'), latest.headers.get('etag'));
  t.is(await versioned.text(), await latest.text());
  const other = await fetch(`${ts.url}/widget/0.0.1/svc-agent.js`);
  t.is(other.status, 404);
  t.is((await other.json()).code, 'route_not_found', 'left to the REST server');
});

test('every version is kept in the object storage and served after a deploy: an earlier version from the archive, immutable, with its own ETag; a version never kept is 404', async (t) => {
  const current = await buildWidget();
  await until(async () => Boolean(await ts.server.storage.headObject(`widget/${WIDGET_VERSION}/svc-agent.js`)), { timeoutMs: 30_000, intervalMs: 20, what: 'this version kept in the archive' });
  t.true((await ts.server.storage.getObject(`widget/${WIDGET_VERSION}/svc-agent.js`)).equals(current.code));
  const liveKit = await fetch(`${ts.url}${WIDGET_PATHS.liveKitVersioned}`);
  t.is(liveKit.status, 200);
  await until(async () => Boolean(await ts.server.storage.headObject(`widget/${WIDGET_VERSION}/livekit-client.js`)), { timeoutMs: 30_000, intervalMs: 20, what: 'its LiveKit module kept once built' });

  // What the server of an earlier version kept before this one was deployed.
  const oldScript = Buffer.from('/* svc-agent 1.1.9 | Apache-2.0 */\nconsole.log("1.1.9");\n');
  const oldLiveKit = Buffer.from('/* svc-agent 1.1.9 LiveKit room */\nexport function joinLiveKitRoom() {}\n');
  await archiveWidgetFile(ts.server.storage, '1.1.9', 'svc-agent.js', oldScript);
  await archiveWidgetFile(ts.server.storage, '1.1.9', 'livekit-client.js', oldLiveKit);
  for (const [file, code] of [['svc-agent.js', oldScript], ['livekit-client.js', oldLiveKit]] as const) {
    const res = await fetch(`${ts.url}/widget/1.1.9/${file}`, { headers: { 'accept-encoding': 'gzip' } });
    t.is(res.status, 200, file);
    t.is(res.headers.get('cache-control'), WIDGET_CACHE.versioned);
    t.is(res.headers.get('access-control-allow-origin'), '*');
    t.is(res.headers.get('x-widget-version'), '1.1.9');
    t.is(res.headers.get('content-encoding'), 'gzip');
    t.true(Buffer.from(await res.arrayBuffer()).equals(code), `${file}: the bytes that version served`);
    const etag = res.headers.get('etag')!;
    t.not(etag.replace('-gz"', '"'), current.etag);
    t.is((await fetch(`${ts.url}/widget/1.1.9/${file}`, { headers: { 'if-none-match': etag } })).status, 304);
  }
  const again = await archiveWidgetFile(ts.server.storage, '1.1.9', 'svc-agent.js', Buffer.from('other bytes')).then(() => ts.server.storage.getObject('widget/1.1.9/svc-agent.js'));
  t.true(again.equals(oldScript), 'a kept version is never overwritten');
  for (const path of ['/widget/1.1.8/svc-agent.js', '/widget/1.1.8/livekit-client.js', '/widget/..%2F..%2Fetc/svc-agent.js', '/widget/1.1.9x/svc-agent.js']) {
    const res = await fetch(`${ts.url}${path}`);
    t.is(res.status, 404, path);
    t.is((await res.json()).code, 'route_not_found', path);
  }
});

test('HEAD, CORS preflight, identity encoding, and methods that are not reads', async (t) => {
  const head = await fetch(`${ts.url}${WIDGET_PATHS.latest}`, { method: 'HEAD', headers: { 'accept-encoding': 'identity' } });
  t.is(head.status, 200);
  t.is(await head.text(), '');
  const b = await buildWidget();
  t.is(Number(head.headers.get('content-length')), b.code.length, 'uncompressed when gzip is not accepted');
  t.is(head.headers.get('content-encoding'), null);
  const preflight = await fetch(`${ts.url}${WIDGET_PATHS.latest}`, { method: 'OPTIONS', headers: { origin: 'https://customer.example', 'access-control-request-method': 'GET' } });
  t.is(preflight.status, 204);
  t.is(preflight.headers.get('access-control-allow-origin'), '*');
  const post = await fetch(`${ts.url}${WIDGET_PATHS.latest}`, { method: 'POST' });
  t.is(post.status, 405, 'a read-only route: 405 in the error shape');
  t.is((await post.json()).code, 'method_not_allowed');
  t.is(post.headers.get('allow'), 'HEAD, GET, OPTIONS');
});

test('the bundle: built deterministically, small, no framework; size logged', async (t) => {
  const [a, b] = await Promise.all([buildWidget(), buildWidget()]);
  t.is(a.etag, b.etag, 'same input, same bytes');
  t.deepEqual(gunzipSync(a.gzip), a.code);
  t.true(a.code.length < 60 * 1024, `${a.code.length} bytes minified`);
  t.true(a.gzip.length < 20 * 1024, `${a.gzip.length} bytes gzipped`);
  t.log(`svc-agent.js ${WIDGET_VERSION}: ${a.code.length} bytes minified, ${a.gzip.length} bytes gzipped`);
  const text = a.code.toString();
  t.false(text.includes('/work/'), 'no build paths in the output');
  t.true(text.includes('customElements.define("svc-agent"') || /customElements\.define\("svc-agent"/.test(text));
});

test('the LiveKit module beside the widget: latest and versioned with the same cache, CORS and ETag rules; an ES module exporting joinLiveKitRoom; built from the npm package; size logged', async (t) => {
  t.is(WIDGET_PATHS.liveKitVersioned, `/widget/${WIDGET_VERSION}/livekit-client.js`);
  const [latest, versioned] = await Promise.all([
    fetch(`${ts.url}${WIDGET_PATHS.liveKitLatest}`, { headers: { 'accept-encoding': 'gzip' } }),
    fetch(`${ts.url}${WIDGET_PATHS.liveKitVersioned}`, { headers: { 'accept-encoding': 'gzip' } }),
  ]);
  for (const [res, cache] of [[latest, WIDGET_CACHE.latest], [versioned, WIDGET_CACHE.versioned]] as const) {
    t.is(res.status, 200);
    t.is(res.headers.get('cache-control'), cache);
    t.is(res.headers.get('content-type'), 'text/javascript; charset=utf-8');
    t.is(res.headers.get('content-encoding'), 'gzip');
    t.is(res.headers.get('access-control-allow-origin'), '*', 'CORS: a module script is fetched in cors mode');
    t.is(res.headers.get('cross-origin-resource-policy'), 'cross-origin');
    t.is(res.headers.get('x-widget-version'), WIDGET_VERSION);
  }
  const etag = versioned.headers.get('etag')!;
  t.is(latest.headers.get('etag'), etag);
  const code = await versioned.text();
  t.is(await latest.text(), code);
  t.true(code.startsWith(`/* svc-agent ${WIDGET_VERSION} LiveKit room`), code.slice(0, 120));
  t.regex(code, /livekit-client 2\.\d+\.\d+/, 'names the bundled SDK version');
  t.regex(code, /export\s*\{[^}]*\bjoinLiveKitRoom\b[^}]*\}/, 'an ES module exporting joinLiveKitRoom');
  t.false(code.includes('/work/'), 'no build paths in the output');
  const again = await fetch(`${ts.url}${WIDGET_PATHS.liveKitVersioned}`, { headers: { 'if-none-match': etag } });
  t.is(again.status, 304);
  const preflight = await fetch(`${ts.url}${WIDGET_PATHS.liveKitVersioned}`, { method: 'OPTIONS', headers: { origin: 'https://customer.example', 'access-control-request-method': 'GET' } });
  t.is(preflight.status, 204);
  t.is((await fetch(`${ts.url}/widget/0.0.1/livekit-client.js`)).status, 404, 'other versions are not served');

  const [widget, lk] = await Promise.all([buildWidget(), buildLiveKitModule()]);
  t.is(lk.etag, (await buildLiveKitModule()).etag, 'deterministic');
  t.log(`livekit-client.js ${WIDGET_VERSION}: ${lk.code.length} bytes minified, ${lk.gzip.length} bytes gzipped (loaded only for LiveKit rooms)`);
  const text = widget.code.toString();
  t.false(/RTCEngine|SignalClient|livekit\.SignalRequest/.test(text), 'none of the SDK is in the widget bundle');
  t.true(text.includes('livekit-client.js'), 'the widget names the module it imports');
});

test('the demo page embeds the widget for the demo agent, or explains how to pick one; query agent_id must be a UUID', async (t) => {
  demoAgent = null;
  let res = await fetch(`${ts.url}/`);
  t.is(res.status, 200);
  t.is(res.headers.get('content-type'), 'text/html; charset=utf-8');
  t.is(res.headers.get('cache-control'), 'private, no-store');
  let html = await res.text();
  t.false(html.includes('<svc-agent id="agent"'));
  t.true(html.includes('No demo agent is configured'));
  t.true(html.includes(`src="${ts.url}/widget/latest/svc-agent.js"`));

  demoAgent = '11111111-2222-4333-8444-555555555555';
  html = await (await fetch(`${ts.url}/`)).text();
  t.true(html.includes(`<svc-agent id="agent" agent-id="${demoAgent}" core-api-endpoint="${ts.url}"></svc-agent>`));

  const other = '99999999-2222-4333-8444-555555555555';
  html = await (await fetch(`${ts.url}/?agent_id=${other}`)).text();
  t.true(html.includes(`agent-id="${other}"`), 'the query picks another agent');
  html = await (await fetch(`${ts.url}/?agent_id=${encodeURIComponent('"><script>alert(1)</script>')}`)).text();
  t.false(html.includes('<script>alert(1)'), 'anything but a UUID is ignored');
  t.true(html.includes(`agent-id="${demoAgent}"`));

  // {base_url} as the visitor reached it; forwarded headers are ignored unless the operator declared a proxy.
  html = await (await fetch(`${ts.url}/`, { headers: { 'x-forwarded-host': 'avatars.example.com', 'x-forwarded-proto': 'https' } })).text();
  t.true(html.includes(`core-api-endpoint="${ts.url}"`));
  t.false(html.includes('avatars.example.com'));
});

test('the demo page has a Content-Security-Policy: scripts from this server and its inline script by hash, no framing, nosniff (issue 32)', async (t) => {
  const res = await fetch(`${ts.url}/?agent_id=11111111-2222-4333-8444-555555555555`);
  t.is(res.headers.get('x-content-type-options'), 'nosniff');
  t.is(res.headers.get('x-frame-options'), 'DENY');
  const policy = new Map((res.headers.get('content-security-policy') ?? '').split(';').map((d) => d.trim().split(/\s+/)).map(([name, ...values]) => [name!, values]));
  t.deepEqual(policy.get('default-src'), ["'none'"]);
  t.deepEqual(policy.get('frame-ancestors'), ["'none'"]);
  t.deepEqual(policy.get('base-uri'), ["'none'"]);
  t.false((policy.get('script-src') ?? []).includes("'unsafe-inline'"), 'no inline script but the one hashed');
  const html = await res.text();
  const inline = [...html.matchAll(/<script>([\s\S]*?)<\/script>/g)].map((m) => m[1]!);
  t.is(inline.length, 1, 'one inline script');
  t.true(policy.get('script-src')!.includes(`'sha256-${createHash('sha256').update(inline[0]!).digest('base64')}'`), 'its hash is allowed');
  t.true(policy.get('connect-src')!.includes(ts.url.replace(/^http/, 'ws')), 'the signalling socket of this server');
  t.false(/\sstyle="/.test(html), 'no inline style attribute');
});

test('the demo page runs under its policy in a real browser: the widget loads, the page script works, nothing is refused', async (t) => {
  await withBrowser({}, async (browser) => {
    const page = await browser.context.newPage();
    await page.addInitScript(`window.__violations = []; document.addEventListener('securitypolicyviolation', (e) => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));`);
    await page.goto(`${ts.url}/?agent_id=11111111-2222-4333-8444-555555555555`);
    await page.waitForFunction(() => customElements.get('svc-agent') !== undefined);
    await page.fill('#context-text', 'hello');
    await page.click('#context button');
    await page.waitForFunction(() => document.getElementById('log')!.textContent!.includes('appendSystemContext'));
    t.deepEqual(await page.evaluate(() => (window as unknown as { __violations: string[] }).__violations), []);
  });
});

test('behind a declared proxy (trustProxy), the demo page uses the forwarded host and scheme', async (t) => {
  const proxied = await startTestServer({ label: 'widget_proxy', config: { trustProxy: true }, surfaces: { widget: true }, parts: { widget: { demoAgentId: () => '11111111-2222-4333-8444-555555555555' } } });
  t.teardown(() => proxied.stop());
  const html = await (await fetch(`${proxied.url}/`, { headers: { 'x-forwarded-host': 'avatars.example.com', 'x-forwarded-proto': 'https' } })).text();
  t.true(html.includes('core-api-endpoint="https://avatars.example.com"'));
  t.true(html.includes('src="https://avatars.example.com/widget/latest/svc-agent.js"'));
});

test('the REST server is unchanged around the widget routes', async (t) => {
  const spec = await fetch(`${ts.url}/v1/openapi.json`);
  t.is(spec.status, 200);
  const missing = await fetch(`${ts.url}/nothing-here`);
  t.is(missing.status, 404);
  t.is((await missing.json()).code, 'route_not_found');
  const agents = await fetch(`${ts.url}/v1/agents`);
  t.is(agents.status, 401);
});
