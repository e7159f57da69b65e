import 'reflect-metadata';
import { container as rootContainer, type DependencyContainer } from 'tsyringe';

/**
 * Plugin registry: factories keyed by `kind:slug` (`tts:elevenlabs`, `face:human-portrait`,
 * `rooms:embedded`, ...) held in a tsyringe container. The server and the framework only ever
 * ask the registry for "the TTS named X"; vendor code stays inside its plugin.
 */
export type Factory<T = unknown, O = any> = (options: O, registry: Registry) => T;

export interface PluginInfo {
  /** Human-readable label, shown by listings and catalogue endpoints. */
  label?: string;
  /** Free-form descriptor a kind may define (e.g. provider fields for `sts`). */
  descriptor?: Record<string, unknown>;
}

export interface Plugin {
  readonly name: string;
  register(registry: Registry): void;
  /**
   * Optional: work done once per process so that the plugin's first use is no slower than the
   * next (starting an engine, compiling WASM, building caches). A host calls it after start-up,
   * in the background; failing is allowed (the first use then pays, as without it).
   */
  warmUp?(): Promise<void>;
}

export class RegistryError extends Error {
  constructor(
    readonly code: 'unknown_plugin' | 'duplicate_plugin',
    message: string,
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'RegistryError';
  }
}

interface Entry {
  kind: string;
  slug: string;
  factory: Factory;
  info: PluginInfo;
}

const tokenOf = (kind: string, slug: string) => `${kind}:${slug}`;

export class Registry {
  readonly container: DependencyContainer;
  private readonly entries = new Map<string, Entry>();
  private readonly plugins = new Map<string, Plugin>();

  constructor(parent: DependencyContainer = rootContainer) {
    this.container = parent.createChildContainer();
    this.container.registerInstance(Registry, this);
  }

  /** Registers a factory. Re-registering the same key throws unless `replace` is set. */
  register<T, O = any>(kind: string, slug: string, factory: Factory<T, O>, info: PluginInfo = {}, replace = false): this {
    const token = tokenOf(kind, slug);
    if (this.entries.has(token) && !replace) {
      throw new RegistryError('duplicate_plugin', `"${token}" is already registered`, { kind, slug });
    }
    const entry: Entry = { kind, slug, factory: factory as Factory, info };
    this.entries.set(token, entry);
    this.container.register(token, { useValue: entry });
    return this;
  }

  /** Loads a plugin module once (idempotent by name). */
  use(plugin: Plugin): this {
    if (this.plugins.has(plugin.name)) return this;
    this.plugins.set(plugin.name, plugin);
    plugin.register(this);
    return this;
  }

  /**
   * Runs the `warmUp` of every plugin used that has one, one after another (they compete for the
   * same cores). A failure goes to `onError` and the others still run; nothing throws.
   */
  async warmUp(onError?: (plugin: string, error: unknown) => void): Promise<void> {
    for (const plugin of [...this.plugins.values()]) {
      if (!plugin.warmUp) continue;
      try {
        await plugin.warmUp();
      } catch (error) {
        onError?.(plugin.name, error);
      }
    }
  }

  has(kind: string, slug: string): boolean {
    return this.entries.has(tokenOf(kind, slug));
  }

  /** Creates an instance from the factory registered under `kind:slug`. */
  create<T>(kind: string, slug: string, options?: unknown): T {
    const entry = this.entry(kind, slug);
    return entry.factory(options ?? {}, this) as T;
  }

  info(kind: string, slug: string): PluginInfo {
    return this.entry(kind, slug).info;
  }

  /** Slugs registered for a kind, sorted. */
  slugs(kind: string): string[] {
    return [...this.entries.values()].filter((e) => e.kind === kind).map((e) => e.slug).sort();
  }

  list(kind: string): Array<{ slug: string } & PluginInfo> {
    return this.slugs(kind).map((slug) => ({ slug, ...this.entries.get(tokenOf(kind, slug))!.info }));
  }

  private entry(kind: string, slug: string): Entry {
    const token = tokenOf(kind, slug);
    if (!this.container.isRegistered(token)) {
      const known = this.slugs(kind);
      throw new RegistryError(
        'unknown_plugin',
        `no ${kind} plugin named "${slug}"; known ${kind} plugins: ${known.length ? known.join(', ') : '(none registered)'}`,
        { kind, slug, known },
      );
    }
    return this.container.resolve<Entry>(token);
  }
}
