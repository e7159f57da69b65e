/**
 * The one place that loads @roamhq/wrtc (libwebrtc for Node). Loaded lazily so that importing
 * the rooms module (for the registry or the signalling types) never pulls the native library
 * into processes that only hand out tokens.
 */
import { createRequire } from 'node:module';
import type * as Wrtc from '@roamhq/wrtc';

export type WrtcModule = typeof Wrtc;

let loaded: WrtcModule | undefined;
let exitGuarded = false;

export function wrtc(): WrtcModule {
  if (!loaded) loaded = createRequire(import.meta.url)('@roamhq/wrtc') as WrtcModule;
  return loaded;
}

/**
 * wrtc for code that creates media sources. A process that still holds an RTCVideoSource or
 * RTCAudioSource when it exits segfaults in Node's N-API cleanup (node-webrtc issue #636, still
 * true of @roamhq/wrtc 0.10: exit code 139 after a clean shutdown). Once a source may exist, the
 * process that exits cleanly (code 0) ends from its 'exit' event, skipping that cleanup; 'exit'
 * listeners added after this one then do not run (everything async has already finished). A
 * failing exit is left alone so Node prints the error (the code may then read 139).
 */
export function wrtcWithSources(): WrtcModule {
  if (!exitGuarded) {
    exitGuarded = true;
    process.on('exit', (code) => {
      // Only a clean exit is cut short: on a failure Node still has to print the error (printed
      // after 'exit'), and a crash report matters more than the exit code.
      if (code === 0) (process as unknown as { reallyExit(code: number): never }).reallyExit(0);
    });
  }
  return wrtc();
}
