/**
 * The demo page served at / : the widget embedded exactly as a customer would (script tag from
 * {cdn_url}, the element with agent-id and core-api-endpoint), with a live log of every widget
 * event so what the widget reports can be watched. `/?agent_id=<uuid>` picks another agent.
 *
 * It is served with a Content-Security-Policy (issue 32): scripts only from this server and the
 * page's own inline script, allowed by its hash (the script is the same for every request), no
 * framing by other sites (`frame-ancestors 'none'`), `nosniff`.
 */
import { createHash } from 'node:crypto';

const ELEMENT_EVENTS = [
  'botIsSpeaking', 'ReceivedTranscriptTurn', 'ReceivedTranscriptUser', 'ReceivedTranscriptBot', 'ReceivedTranscriptBotPartial',
  'BotTtsStopped', 'UserStartedSpeaking', 'UserStoppedSpeaking', 'ConnectionTimeout', 'UpdateBotState', 'UpdateConnectionState',
  'UpdateQueuing', 'userSpeakingChanged',
];
const WINDOW_EVENTS = ['svcToolCall', 'LatencyReport', 'ConnectionTimingReport', 'SvcSessionOutcome'];

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** The page's one inline script: the same bytes for every request, so its hash is the CSP's. */
const PAGE_SCRIPT = `
(function () {
  var log = document.getElementById('log');
  function line(target, name, detail) {
    var text = new Date().toISOString().slice(11, 23) + ' ' + target + ' ' + name + ' ' + JSON.stringify(detail);
    log.textContent += text + '\\n';
    log.scrollTop = log.scrollHeight;
  }
  ${JSON.stringify(ELEMENT_EVENTS)}.forEach(function (name) {
    window.addEventListener(name, function (e) { line('element', name, e.detail); });
  });
  ${JSON.stringify(WINDOW_EVENTS)}.forEach(function (name) {
    window.addEventListener(name, function (e) { line('window ', name, e.detail); });
  });
  document.getElementById('context').addEventListener('submit', function (e) {
    e.preventDefault();
    var input = document.getElementById('context-text');
    var agent = document.getElementById('agent');
    if (!agent || !input.value) return;
    line('page   ', 'appendSystemContext', agent.appendSystemContext(input.value) ? 'sent' : 'not connected');
    input.value = '';
  });
})();
`;

export const DEMO_PAGE_SCRIPT_HASH = `'sha256-${createHash('sha256').update(PAGE_SCRIPT).digest('base64')}'`;

/**
 * The demo page's security headers. Scripts: this server (the widget, its LiveKit module) and
 * the inline script by hash. Styles: inline allowed, because the widget styles its shadow DOM
 * with a `<style>` element (CSS cannot run script). Connections: this server over HTTP and
 * WebSocket (Session API, signalling), plus `connectOrigins` (the deployment's LiveKit server).
 * Images and media from anywhere (an agent's preview may live on any https host).
 */
export function demoPageSecurityHeaders(baseUrl: string, connectOrigins: readonly string[]): Record<string, string> {
  const origin = new URL(baseUrl).origin;
  const socket = origin.replace(/^http/, 'ws');
  // A LiveKit server is reached over its WebSocket and over HTTP (the SDK's validation request).
  const connect = connectOrigins.flatMap((o) => {
    const u = new URL(o);
    const secure = u.protocol === 'wss:' || u.protocol === 'https:';
    return [`${secure ? 'wss' : 'ws'}://${u.host}`, `${secure ? 'https' : 'http'}://${u.host}`];
  });
  const policy = [
    "default-src 'none'",
    `script-src 'self' ${origin} ${DEMO_PAGE_SCRIPT_HASH}`,
    "style-src 'self' 'unsafe-inline'",
    ["connect-src 'self'", origin, socket, ...new Set(connect)].join(' '),
    "img-src 'self' data: blob: https: http:",
    "media-src 'self' blob: https: http:",
    "frame-ancestors 'none'",
    "base-uri 'none'",
    "form-action 'none'",
  ].join('; ');
  return { 'Content-Security-Policy': policy, 'X-Content-Type-Options': 'nosniff', 'X-Frame-Options': 'DENY' };
}

export function demoPage(input: { agentId: string | null; baseUrl: string; scriptPath: string }): string {
  const base = escapeHtml(input.baseUrl);
  const script = escapeHtml(`${input.baseUrl}${input.scriptPath}`);
  const widget = input.agentId
    ? `<svc-agent id="agent" agent-id="${escapeHtml(input.agentId)}" core-api-endpoint="${base}"></svc-agent>`
    : `<p class="note">No demo agent is configured on this server. Create and publish an agent whose <code>allowed_hostnames</code> admit this page, then open <code>/?agent_id=&lt;agent_id&gt;</code>.</p>`;
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>svc-agent demo</title>
<script src="${script}" defer></script>
<style>
:root{color-scheme:light dark;font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
body{margin:0;padding:24px 16px;max-width:980px;margin-inline:auto}
main{display:grid;grid-template-columns:minmax(0,340px) minmax(0,1fr);gap:24px;align-items:start}
@media (max-width:720px){main{grid-template-columns:1fr}}
h1{font-size:22px;margin:0 0 4px}
pre,code{font:13px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{background:rgba(127,127,127,.12);padding:10px;border-radius:8px;overflow:auto}
#log{height:420px;overflow:auto;margin:0}
.note{padding:12px;border:1px solid rgba(127,127,127,.4);border-radius:8px}
form{display:flex;gap:8px;margin-top:12px}
input{flex:1;min-width:0;font:inherit;padding:6px 8px}
button{font:inherit}
h2{font-size:16px;margin:0 0 8px}
</style>
</head>
<body>
<header>
<h1>svc-agent demo</h1>
<p>The conversational avatar widget, embedded with two lines:</p>
<pre>&lt;script src="${script}"&gt;&lt;/script&gt;
&lt;svc-agent agent-id="${escapeHtml(input.agentId ?? '<agent_id>')}" core-api-endpoint="${base}"&gt;&lt;/svc-agent&gt;</pre>
</header>
<main>
<section>
${widget}
<form id="context" aria-label="Add context for the agent"><input id="context-text" placeholder="Context for the agent (appendSystemContext)" aria-label="Context text"><button>Send</button></form>
</section>
<section aria-label="Widget events">
<h2>Events</h2>
<pre id="log" aria-live="off"></pre>
</section>
</main>
<script>${PAGE_SCRIPT}</script>
</body>
</html>
`;
}
