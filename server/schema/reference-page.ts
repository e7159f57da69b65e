/** Renders the OpenAPI document as one self-contained HTML reference page (no scripts, no CDN). */
export function renderReferencePage(doc: any): string {
  const esc = (s: unknown) => String(s ?? '').replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  const schema = (s: unknown) => `<pre>${esc(JSON.stringify(s, null, 2))}</pre>`;
  const byTag = new Map<string, string[]>();
  for (const [path, ops] of Object.entries<any>(doc.paths)) {
    for (const [method, op] of Object.entries<any>(ops)) {
      const params = (op.parameters ?? [])
        .map((p: any) => `<tr><td><code>${esc(p.name)}</code></td><td>${esc(p.in)}</td><td>${p.required ? 'yes' : ''}</td><td><code>${esc(JSON.stringify(p.schema))}</code></td></tr>`)
        .join('');
      const body = op.requestBody?.content?.['application/json']?.schema;
      const responses = Object.entries<any>(op.responses)
        .map(([status, r]) => `<li><b>${esc(status)}</b> ${esc(r.description)}</li>`)
        .join('');
      const html = `<section id="${esc(op.operationId)}"><h3><span class="m ${esc(method)}">${esc(method.toUpperCase())}</span> <code>/v1${esc(path)}</code></h3>
<p>${esc(op.summary)}${op.description ? `<br>${esc(op.description)}` : ''}</p>
<p class="auth">${op.security?.length ? 'Requires <code>X-API-Key</code>' : 'No API key'}</p>
${params ? `<table><tr><th>Parameter</th><th>In</th><th>Required</th><th>Schema</th></tr>${params}</table>` : ''}
${body ? `<details><summary>Request body</summary>${schema(body)}</details>` : ''}
<ul>${responses}</ul></section>`;
      const tag = op.tags?.[0] ?? 'Other';
      byTag.set(tag, [...(byTag.get(tag) ?? []), html]);
    }
  }
  const toc = [...byTag.keys()].map((t) => `<li><a href="#tag-${esc(t)}">${esc(t)}</a></li>`).join('');
  const sections = [...byTag.entries()].map(([t, ops]) => `<h2 id="tag-${esc(t)}">${esc(t)}</h2>${ops.join('')}`).join('');
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${esc(doc.info.title)} ${esc(doc.info.version)}</title>
<style>body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#1d2330}
code,pre{font-family:ui-monospace,monospace;font-size:13px}pre{background:#f4f5f7;padding:.5rem;overflow:auto}
section{border-top:1px solid #ddd;padding:.5rem 0}.m{display:inline-block;min-width:4.5em;color:#fff;border-radius:3px;padding:0 .3em;text-align:center}
.get{background:#2f7d32}.post{background:#1565c0}.put{background:#6a1b9a}.patch{background:#ef6c00}.delete{background:#c62828}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}.auth{color:#666}</style></head>
<body><h1>${esc(doc.info.title)} <small>${esc(doc.info.version)}</small></h1><p>${esc(doc.info.description)}</p>
<p>Base URL: <code>${esc(doc.servers[0].url)}</code>. Machine-readable: <a href="openapi.json">openapi.json</a>.</p>
<ul>${toc}</ul>${sections}</body></html>`;
}
