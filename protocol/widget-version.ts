/**
 * The widget's version: reported as `widgetVersion` in SvcSessionOutcome and served at
 * /widget/<version>/svc-agent.js with immutable caching. Bump it with every change under
 * clients/web/ (and to the room client it bundles): a versioned URL must never change content.
 */
export const WIDGET_VERSION = '1.2.5';
