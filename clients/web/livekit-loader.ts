/**
 * Loads the LiveKit room (livekit-transport.ts with LiveKit's browser SDK) only when a Session's
 * room_url is a LiveKit server: a dynamic `import()` of the ES module the server builds beside
 * the widget, /widget/<WIDGET_VERSION>/livekit-client.js (immutable, CORS like svc-agent.js).
 * A page whose sessions run in embedded rooms never fetches it. The module defines nothing on
 * the page (its exports reach only this import); the module map evaluates it once per page, so
 * several widgets share one copy, and a failed load is tried again by the next call.
 *
 * Where from: beside the widget script when it was loaded from a `/widget/<v>/svc-agent.js` URL
 * (a CDN in front of the server keeps serving both), else from `core-api-endpoint`. Always the
 * version of this widget: the pair never mixes versions.
 */
import type { JoinRoom } from './transport.ts';
import { WIDGET_VERSION } from '../../protocol/widget-version.ts';

export const LIVEKIT_MODULE_FILE = 'livekit-client.js';

/** The widget script's own URL, read while it runs (null when bundled into something else). */
const widgetScriptUrl: string | null = (() => {
  try {
    const script = typeof document !== 'undefined' ? document.currentScript : null;
    return script && 'src' in script && typeof script.src === 'string' ? script.src : null;
  } catch {
    return null;
  }
})();

export function liveKitModuleUrl(endpoint: string): string {
  const beside = widgetScriptUrl ? /^(https?:\/\/[^?#]*\/widget\/)[^/?#]+\/svc-agent\.js(?:[?#].*)?$/.exec(widgetScriptUrl) : null;
  return `${beside ? beside[1] : `${endpoint}/widget/`}${WIDGET_VERSION}/${LIVEKIT_MODULE_FILE}`;
}

const loads = new Map<string, Promise<JoinRoom>>();

/** The LiveKit join function; rejects when the module cannot be loaded. */
export function loadLiveKit(endpoint: string): Promise<JoinRoom> {
  const url = liveKitModuleUrl(endpoint);
  let load = loads.get(url);
  if (!load) {
    load = (import(url) as Promise<{ joinLiveKitRoom?: unknown }>).then((module) => {
      if (typeof module.joinLiveKitRoom !== 'function') throw new Error(`${url} is not the widget's LiveKit module`);
      return module.joinLiveKitRoom as JoinRoom;
    });
    load.catch(() => loads.delete(url));
    loads.set(url, load);
  }
  return load;
}
