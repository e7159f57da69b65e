/** The package's entry points (from the exports map) and the heavy optional parts each may load. */
import { readFileSync } from 'node:fs';

const manifest = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  exports: Record<string, string | { types: string; default: string }>;
};

/** Modules too heavy (native bindings, wasm engines, the server stack) to load unasked. */
export const HEAVY_MODULES = [
  '@livekit/rtc-node',
  'livekit-server-sdk',
  '@roamhq/wrtc',
  'sharp',
  '@tensorflow/tfjs-core',
  '@tensorflow/tfjs-backend-wasm',
  '@vladmandic/face-api',
  'koa',
  'knex',
  'pg',
  '@electric-sql/pglite',
  '@aws-sdk/client-s3',
  'svc-avatar/server',
] as const;

/**
 * What each entry point loads among HEAVY_MODULES at import (docs/package.md says the same).
 * - The transports load sharp on the first image they decode (transports/load-sharp.ts), so
 *   `transports`, `transports/webrtc`, `agent` and `clients` load none of them at import.
 * - The face plugin loads sharp at import; its landmark detector (TensorFlow, face-api) loads on
 *   first detection, and WebRTC (wrtc) loads when the first peer connection is made.
 */
const EXPECTED_HEAVY: Record<string, readonly string[]> = {
  'transports/livekit': ['@livekit/rtc-node', 'livekit-server-sdk'],
  // @livekit/agents itself loads sharp (its llm/utils.js imports it at the top).
  'livekit-agents': ['@livekit/rtc-node', 'livekit-server-sdk', 'sharp'],
  'plugins/face': ['sharp'],
};

export interface EntryPoint {
  /** The import specifier after `svc-avatar/`. */
  readonly subpath: string;
  /** The compiled file under dist/, without extension. */
  readonly file: string;
  readonly heavy: readonly string[];
}

export const ENTRY_POINTS: readonly EntryPoint[] = Object.entries(manifest.exports)
  .filter(([key]) => key !== './package.json')
  .map(([key, target]) => {
    const subpath = key.slice(2);
    const file = (typeof target === 'string' ? target : target.default).replace(/^\.\/dist\//, '').replace(/\.js$/, '');
    return { subpath, file, heavy: EXPECTED_HEAVY[subpath] ?? [] };
  });

/** The heavy modules among loaded module URLs, sorted and without repeats. */
export function heavyModulesIn(urls: readonly string[]): string[] {
  const found = new Set<string>();
  for (const url of urls) {
    for (const name of HEAVY_MODULES) {
      const marker = name === 'svc-avatar/server' ? '/svc-avatar/server/' : `/node_modules/${name}/`;
      if (url.includes(marker)) found.add(name);
    }
  }
  return [...found].sort();
}
