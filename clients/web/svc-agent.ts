/**
 * Entry of the widget bundle (served at /widget/latest/svc-agent.js and /widget/<version>/svc-agent.js):
 * defines `<svc-agent>` once, even when the script is included twice.
 */
import { createElementClass } from './element.ts';

const scriptStart = performance.now();

if (typeof customElements !== 'undefined' && !customElements.get('svc-agent')) {
  customElements.define('svc-agent', createElementClass(scriptStart));
}
