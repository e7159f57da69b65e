/**
 * Issue 14 (b), the API reference: every field of the published OpenAPI document is described,
 * and `/v1/docs` is Swagger UI served by this server (no CDN): a real chromium renders the
 * operations and the field descriptions of our document (Markdown rendered, not raw backticks)
 * while no request leaves the machine and the page's CSP is never violated.
 */
import test from 'ava';
import type { Page } from 'playwright-core';
import { launchChromiumWith, type Chromium } from '../support/chromium.ts';
import { startTestServer, type TestServer } from './harness.ts';

let ts: TestServer;
let doc: any;

test.before(async () => {
  ts = await startTestServer({ label: 'api_reference', pglite: true });
  doc = (await ts.call('GET', '/v1/openapi.json', { key: null })).body;
});
test.after.always(async () => {
  await ts?.stop();
});

/** Every `properties` entry (at any depth, in items, oneOf/anyOf/allOf, additionalProperties) without a description. */
function undescribed(schema: any, where: string, out: string[]): string[] {
  if (!schema || typeof schema !== 'object') return out;
  for (const [name, property] of Object.entries<any>(schema.properties ?? {})) {
    if (typeof property?.description !== 'string' || !property.description.trim()) out.push(`${where}.${name}`);
    undescribed(property, `${where}.${name}`, out);
  }
  if (schema.items) undescribed(schema.items, `${where}[]`, out);
  for (const key of ['oneOf', 'anyOf', 'allOf'] as const) (schema[key] ?? []).forEach((s: any, i: number) => undescribed(s, `${where}/${key}${i}`, out));
  if (schema.additionalProperties && typeof schema.additionalProperties === 'object') undescribed(schema.additionalProperties, `${where}{}`, out);
  return out;
}

test('every schema field and every parameter of the OpenAPI document has a description', (t) => {
  const missing: string[] = [];
  let fields = 0;
  const count = (s: any): void => {
    if (!s || typeof s !== 'object') return;
    for (const p of Object.values<any>(s.properties ?? {})) {
      fields++;
      count(p);
    }
    if (s.items) count(s.items);
    for (const k of ['oneOf', 'anyOf', 'allOf']) (s[k] ?? []).forEach(count);
  };
  for (const [path, operations] of Object.entries<any>(doc.paths)) {
    for (const [method, op] of Object.entries<any>(operations)) {
      const at = `${method.toUpperCase()} ${path}`;
      for (const parameter of op.parameters ?? []) {
        if (!parameter.description) missing.push(`${at} parameter ${parameter.in}:${parameter.name}`);
      }
      for (const [type, content] of Object.entries<any>(op.requestBody?.content ?? {})) {
        undescribed(content.schema, `${at} body(${type})`, missing);
        count(content.schema);
      }
      for (const [status, response] of Object.entries<any>(op.responses)) {
        for (const content of Object.values<any>(response.content ?? {})) {
          undescribed(content.schema, `${at} ${status}`, missing);
          count(content.schema);
        }
      }
    }
  }
  for (const [name, schema] of Object.entries<any>(doc.components.schemas)) undescribed(schema, `#/components/schemas/${name}`, missing);
  t.true(fields > 300, `the walk reached the document's fields (${fields})`);
  t.deepEqual(missing, []);
});

test('the walk catches an undescribed field (the check can fail)', (t) => {
  t.deepEqual(undescribed({ type: 'object', properties: { a: { type: 'string', description: 'x' }, b: { type: 'object', properties: { c: { type: 'integer' } }, description: 'y' } } }, 'S', []), ['S.b.c']);
  t.deepEqual(undescribed({ type: 'array', items: { oneOf: [{ properties: { d: {} } }] } }, 'S', []), ['S[]/oneOf0.d']);
});

test('the ModelConfig schema says what face_id points at, and carries reference_check', (t) => {
  const schema = doc.paths['/model-configs/{model_config_id}'].get.responses['200'].content['application/json'].schema;
  t.regex(schema.properties.model_config_id.description, /`face_id`/);
  t.deepEqual(schema.properties.reference_check.properties.status.enum, ['pending', 'ok', 'failed', 'unchecked']);
  const agent = doc.paths['/agents/{agent_id}'].get.responses['200'].content['application/json'].schema;
  t.regex(agent.properties.face_id.description, /model configuration id/);
});

test('/v1/docs is a Swagger UI page with no inline script, a strict CSP, and assets served from this server', async (t) => {
  const res = await fetch(`${ts.url}/v1/docs`);
  t.is(res.status, 200);
  t.regex(res.headers.get('content-type') ?? '', /^text\/html; charset=utf-8/);
  const html = await res.text();
  const csp = res.headers.get('content-security-policy') ?? '';
  t.regex(csp, /default-src 'none'/);
  t.regex(csp, /script-src 'self'(;|$)/, 'scripts from this origin only');
  t.regex(csp, /frame-ancestors 'none'/);
  t.is(res.headers.get('x-content-type-options'), 'nosniff');
  t.regex(res.headers.get('cache-control') ?? '', /^public, max-age=300$/);
  t.false(/<script(?![^>]*\bsrc=)[^>]*>/i.test(html), 'every script has a src');
  t.false(/https?:\/\/(?!127\.0\.0\.1)/.test(html.replace(ts.url, '')), 'no absolute URL to another host');
  t.true(html.includes('<noscript>') && html.includes('/v1/agents/{agent_id}/verify-provider'), 'operations listed for readers without JavaScript');

  const links = [...html.matchAll(/(?:src|href)="(docs\/assets\/[^"]+)"/g)].map((m) => m[1]!.replace(/&#38;/g, '&'));
  t.deepEqual(links.map((l) => l.split('?')[0]).sort(), ['docs/assets/favicon-32x32.png', 'docs/assets/reference.css', 'docs/assets/reference.js', 'docs/assets/swagger-ui-bundle.js', 'docs/assets/swagger-ui.css']);
  const types: Record<string, RegExp> = { js: /^text\/javascript; charset=utf-8$/, css: /^text\/css; charset=utf-8$/, png: /^image\/png$/ };
  for (const link of links) {
    const asset = await fetch(`${ts.url}/v1/${link}`, { headers: { 'accept-encoding': 'gzip' } });
    t.is(asset.status, 200, link);
    t.regex(asset.headers.get('content-type') ?? '', types[link.split('?')[0]!.split('.').pop()!]!, link);
    t.is(asset.headers.get('cache-control'), 'public, max-age=31536000, immutable', `${link}: content-hashed URL`);
    t.is(asset.headers.get('x-content-type-options'), 'nosniff');
    const etag = asset.headers.get('etag')!;
    t.is((await fetch(`${ts.url}/v1/${link}`, { headers: { 'if-none-match': etag } })).status, 304, `${link} revalidates`);
    await asset.arrayBuffer();
  }
  const bundle = await fetch(`${ts.url}/v1/docs/assets/swagger-ui-bundle.js`, { headers: { 'accept-encoding': 'gzip' } });
  t.is(bundle.headers.get('content-encoding'), 'gzip');
  t.is(bundle.headers.get('cache-control'), 'public, max-age=300', 'without the hash: a short cache');
  t.true((await bundle.text()).includes('SwaggerUIBundle'), 'the swagger-ui-dist bundle itself');
  const missing = await fetch(`${ts.url}/v1/docs/assets/..%2Fpackage.json`);
  t.is(missing.status, 404);
  t.is(((await missing.json()) as { code: string }).code, 'not_found');
});

test('in chromium the page renders our operations and field descriptions, offline, without CSP violations', async (t) => {
  const browser: Chromium = await launchChromiumWith({ viewport: { width: 1280, height: 900 } });
  t.teardown(() => browser.close());
  const requests: string[] = [];
  browser.context.on('request', (r) => void requests.push(r.url()));
  const page: Page = await browser.context.newPage();
  const problems: string[] = [];
  page.on('console', (m) => void (m.type() === 'error' && problems.push(m.text())));
  page.on('pageerror', (e) => void problems.push(e.message));
  await page.goto(`${ts.url}/v1/docs#/Model%20configurations/createModelConfig`);

  // Every operation of the document is rendered.
  const operationCount = Object.values<any>(doc.paths).reduce((n, ops) => n + Object.keys(ops).length, 0);
  await page.locator('.opblock').first().waitFor({ timeout: 60_000 });
  t.is(await page.locator('.opblock').count(), operationCount);
  t.true(await page.locator('.opblock-summary-path', { hasText: '/agents/{agent_id}/verify-provider' }).first().isVisible());
  await page.getByText('Conversational Avatar Service REST API').first().waitFor();

  // The deep-linked operation is open and its response schema shows our field descriptions, Markdown rendered.
  const op = page.locator('#operations-Model_configurations-createModelConfig');
  const description = op.locator('.renderedMarkdown', { hasText: 'Agents reference it as' }).first();
  await description.waitFor({ timeout: 30_000 });
  t.is(await description.locator('code', { hasText: 'face_id' }).count(), 1, 'backticks rendered as code');
  t.false((await description.innerText()).includes('`'), 'no raw backticks');
  await op.locator('.renderedMarkdown', { hasText: 'Check of the reference image' }).first().waitFor();

  const foreign = requests.filter((u) => !u.startsWith(`${ts.url}/`) && !u.startsWith('data:'));
  t.deepEqual(foreign, [], 'no request leaves this server');
  t.true(requests.some((u) => u === `${ts.url}/v1/openapi.json`), 'the page loaded our document');
  t.deepEqual(problems.filter((p) => /Content Security Policy|Refused/i.test(p)), [], 'no CSP violation');
  t.deepEqual(problems, []);
});
