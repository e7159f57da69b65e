/**
 * Builds the `<svc-agent>` script from clients/web/ with esbuild, in memory: one minified IIFE
 * (no framework, no source map), plus its gzip and a content ETag. The room client
 * (transports/webrtc/room-client.js) is bundled unmodified: the virtual module `svc:room-client`
 * runs that plain script against a private `window`, so the bundle defines nothing on the host
 * page but the custom element, and the signalling client exists once in the codebase.
 *
 * Beside it, `buildLiveKitModule()`: the widget's LiveKit room (clients/web/livekit-transport.ts)
 * with LiveKit's browser SDK (`livekit-client` from node_modules), one minified ES module that
 * the widget imports only for sessions in LiveKit rooms (clients/web/livekit-loader.ts).
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { build, type Plugin } from 'esbuild';
import { WIDGET_VERSION } from '../../protocol/widget-version.ts';

export const WIDGET_ENTRY = fileURLToPath(new URL('../../clients/web/svc-agent.ts', import.meta.url));
export const LIVEKIT_ENTRY = fileURLToPath(new URL('../../clients/web/livekit-transport.ts', import.meta.url));
export const ROOM_CLIENT_FILE = fileURLToPath(new URL('../../transports/webrtc/room-client.js', import.meta.url));

/** Browsers the bundle is lowered for (custom elements v1, shadow DOM, WebRTC unified plan). */
export const WIDGET_TARGETS = ['chrome87', 'firefox85', 'safari15', 'edge87'];

export interface WidgetBundle {
  readonly version: string;
  readonly code: Buffer;
  readonly gzip: Buffer;
  /** Strong ETag from the content. */
  readonly etag: string;
}

const roomClientPlugin: Plugin = {
  name: 'svc-room-client',
  setup(b) {
    b.onResolve({ filter: /^svc:room-client$/ }, () => ({ path: ROOM_CLIENT_FILE, namespace: 'svc-room-client' }));
    b.onLoad({ filter: /.*/, namespace: 'svc-room-client' }, async (args) => ({
      contents: `var scope = {};\n(function (window) {\n${await readFile(args.path, 'utf8')}\n})(scope);\nexport default scope.SvcRoom;\n`,
      loader: 'js',
      resolveDir: dirname(args.path),
    }));
  },
};

export async function buildWidget(options: { minify?: boolean } = {}): Promise<WidgetBundle> {
  return bundle('the widget', WIDGET_ENTRY, 'iife', `/* svc-agent ${WIDGET_VERSION} | Apache-2.0 */`, options.minify, [roomClientPlugin]);
}

/** The version of `livekit-client` bundled into the LiveKit module (its package.json). */
export async function liveKitClientVersion(): Promise<string> {
  // Its `exports` do not list package.json: found from the resolved entry (dist/…).
  const entry = createRequire(import.meta.url).resolve('livekit-client');
  const pkg = JSON.parse(await readFile(join(dirname(dirname(entry)), 'package.json'), 'utf8')) as { version: string };
  return pkg.version;
}

/**
 * The widget's LiveKit room with `livekit-client` bundled in: one minified ES module exporting
 * `joinLiveKitRoom` (and nothing on the page), for the same browsers as the widget.
 */
export async function buildLiveKitModule(options: { minify?: boolean } = {}): Promise<WidgetBundle> {
  const banner = `/* svc-agent ${WIDGET_VERSION} LiveKit room | Apache-2.0; livekit-client ${await liveKitClientVersion()} | Apache-2.0 */`;
  return bundle('the LiveKit module', LIVEKIT_ENTRY, 'esm', banner, options.minify);
}

/** One browser bundle for the widget's targets (minified unless asked otherwise), in memory. */
async function bundle(what: string, entry: string, format: 'iife' | 'esm', banner: string, minify = true, plugins: Plugin[] = []): Promise<WidgetBundle> {
  const result = await build({
    entryPoints: [entry],
    bundle: true,
    write: false,
    format,
    platform: 'browser',
    target: WIDGET_TARGETS,
    minify,
    legalComments: 'none',
    charset: 'utf8',
    logLevel: 'silent',
    banner: { js: banner },
    plugins,
  });
  const file = result.outputFiles[0];
  if (!file) throw new Error(`esbuild produced no output for ${what}`);
  return bundleOf(Buffer.from(file.contents));
}

/** A bundle of built code: its gzip and its strong ETag (an earlier version's too, read back from the archive). */
export function bundleOf(code: Buffer, version: string = WIDGET_VERSION): WidgetBundle {
  return {
    version,
    code,
    gzip: gzipSync(code, { level: 9 }),
    etag: `"${createHash('sha256').update(code).digest('base64url').slice(0, 22)}"`,
  };
}
