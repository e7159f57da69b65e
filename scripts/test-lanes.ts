/**
 * Which test files are heavy: those that start chromium, WebRTC peers (libwebrtc through wrtc or
 * LiveKit's SDK, werift), bot sessions or child processes, in the file itself or in a test helper
 * it imports (test/ and testing/, followed through their relative imports). Two of them at once on
 * this 2-core machine took each other's cores: frames late, audio timing lost, a browser crashed.
 * The test runner (scripts/run-tests.ts) runs them one at a time, beside the light ones.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/** What makes a file heavy, as it appears in test code. */
export const HEAVY_MARKERS = [
  // chromium
  'launchChromium',
  'playwright-core',
  // WebRTC peers and media
  '@roamhq/wrtc',
  'wrtcWithSources',
  '@livekit/rtc-node',
  "from 'werift'",
  'fakes/livekit-server',
  'publishAvatar',
  'mountRooms',
  // servers built with surfaces that run face sessions or WebRTC rooms (server/config/surfaces.ts)
  'realtime: true',
  'rooms: true',
  // bot sessions (a face session each) and child processes
  'startSessionServer',
  'node:child_process',
  'spawnEntryPoint',
] as const;

export interface Lanes {
  /** One file at a time. */
  readonly heavy: string[];
  readonly light: string[];
  /** Why each heavy file is (the file and the marker found), for the runner's log. */
  readonly reasons: Map<string, string>;
}

/** Test files of the suite, as ava's `files` glob `test/**\/*.test.ts` finds them (relative to root). */
export function suiteFiles(root: string): string[] {
  return (readdirSync(join(root, 'test'), { recursive: true }) as string[])
    .filter((f) => f.endsWith('.test.ts'))
    .map((f) => join('test', f))
    .sort();
}

export function splitLanes(root: string, files: readonly string[]): Lanes {
  const reasons = new Map<string, string>();
  const heavy: string[] = [];
  const light: string[] = [];
  for (const file of files) {
    const why = heavyMarker(root, resolve(root, file), new Set());
    if (why) {
      heavy.push(file);
      reasons.set(file, why);
    } else light.push(file);
  }
  return { heavy, light, reasons };
}

function heavyMarker(root: string, file: string, seen: Set<string>): string | undefined {
  if (seen.has(file)) return undefined;
  seen.add(file);
  const source = readFileSync(file, 'utf8');
  const marker = HEAVY_MARKERS.find((m) => source.includes(m));
  if (marker) return `${relative(root, file)}: ${marker}`;
  for (const [, spec] of source.matchAll(/from\s+'(\.[^']+)'/g)) {
    const target = resolve(dirname(file), spec!);
    const rel = relative(root, target);
    if (!(rel.startsWith('test/') || rel.startsWith('testing/')) || !existsSync(target)) continue;
    const found = heavyMarker(root, target, seen);
    if (found) return found;
  }
  return undefined;
}
