/**
 * The API reference page (`GET /v1/docs`): Swagger UI (the `swagger-ui-dist` package, served by
 * this server from `/v1/docs/assets/`, nothing from a CDN) rendering `/v1/openapi.json`. The page
 * has no inline script (its CSP allows scripts from this origin only); a `<noscript>` list of the
 * operations serves readers without JavaScript.
 */

/** Our start-up script for Swagger UI, served as `/v1/docs/assets/reference.js`. */
export const REFERENCE_SCRIPT = `'use strict';
(function () {
  var root = document.getElementById('reference');
  window.ui = SwaggerUIBundle({
    url: root.getAttribute('data-spec-url'),
    domNode: root,
    deepLinking: true,
    // Never send the document to the public validator service (everything stays on this server).
    validatorUrl: null,
    docExpansion: 'list',
    defaultModelRendering: 'model',
    defaultModelExpandDepth: 3,
    defaultModelsExpandDepth: 1,
    displayRequestDuration: true,
    filter: true,
    showExtensions: false,
    tryItOutEnabled: false,
    persistAuthorization: false,
    syntaxHighlight: { activated: true, theme: 'agate' }
  });
})();
`;

/** Small overrides of the Swagger UI style (`/v1/docs/assets/reference.css`). */
export const REFERENCE_STYLE = `body { margin: 0; background: #fafafa; }
.reference-header { font: 15px/1.5 system-ui, sans-serif; max-width: 1460px; margin: 0 auto; padding: 1rem 20px 0; color: #3b4151; }
.reference-header a { color: #4990e2; }
.swagger-ui .info { margin: 1rem 0; }
`;

const esc = (s: unknown) => String(s ?? '').replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

export interface ReferencePageAssets {
  /** URL (relative to the page) of each served asset, with its content hash. */
  url(name: string): string;
}

/** The HTML shell; `doc` supplies the title and the `<noscript>` operation list. */
export function renderReferencePage(doc: any, assets: ReferencePageAssets): string {
  const operations: string[] = [];
  for (const [path, ops] of Object.entries<any>(doc.paths ?? {})) {
    for (const [method, op] of Object.entries<any>(ops)) {
      operations.push(`<li><code>${esc(method.toUpperCase())} /v1${esc(path)}</code> ${esc(op.summary)}</li>`);
    }
  }
  const title = `${esc(doc.info?.title)} ${esc(doc.info?.version)}`;
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>${title}</title>
<link rel="icon" type="image/png" href="${esc(assets.url('favicon-32x32.png'))}">
<link rel="stylesheet" href="${esc(assets.url('swagger-ui.css'))}">
<link rel="stylesheet" href="${esc(assets.url('reference.css'))}">
</head>
<body>
<header class="reference-header">Base URL <code>${esc(doc.servers?.[0]?.url)}</code>. Machine-readable: <a href="openapi.json">openapi.json</a> (OpenAPI 3.1).</header>
<noscript><div class="reference-header"><h1>${title}</h1><p>This reference needs JavaScript; without it, read <a href="openapi.json">openapi.json</a>. Operations:</p><ul>${operations.join('')}</ul></div></noscript>
<div id="reference" data-spec-url="openapi.json"></div>
<script src="${esc(assets.url('swagger-ui-bundle.js'))}"></script>
<script src="${esc(assets.url('reference.js'))}"></script>
</body>
</html>
`;
}
