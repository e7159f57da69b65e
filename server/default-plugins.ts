import type { Logger } from 'pino';
import type { Plugin, Registry } from '../core/registry.ts';

/** Plugins `npm start` loads: module path and the exported Plugin's name. */
export const DEFAULT_PLUGINS = [
  { module: '../plugins/local/index.ts', exportName: 'localPlugin' },
  { module: '../plugins/face/index.ts', exportName: 'facePlugin' },
  { module: '../plugins/openai/index.ts', exportName: 'openaiPlugin' },
  { module: '../plugins/deepgram/index.ts', exportName: 'deepgramPlugin' },
  { module: '../plugins/elevenlabs/index.ts', exportName: 'elevenlabsPlugin' },
  { module: '../plugins/cartesia/index.ts', exportName: 'cartesiaPlugin' },
  { module: '../plugins/openai-realtime/index.ts', exportName: 'openaiRealtimePlugin' },
  { module: '../plugins/elevenlabs-convai/index.ts', exportName: 'elevenlabsConvaiPlugin' },
] as const;

/**
 * Loads the default plugins into the registry. A plugin that fails to load is reported and
 * skipped, so the API still serves (its catalogue entries are simply absent).
 */
export async function loadDefaultPlugins(registry: Registry, logger: Logger): Promise<string[]> {
  const loaded: string[] = [];
  for (const { module, exportName } of DEFAULT_PLUGINS) {
    try {
      const plugin = (await import(module))[exportName] as Plugin;
      registry.use(plugin);
      loaded.push(plugin.name);
    } catch (err) {
      logger.warn({ err, module }, 'plugin failed to load; continuing without it');
    }
  }
  return loaded;
}
