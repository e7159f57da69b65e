/**
 * Debian chromium through playwright-core, with a fresh profile per launch and the flags this
 * machine needs (no sandbox, no GPU, no background networking). Imports no server code, so
 * benches that run the server in another process can use it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';

export const CHROMIUM_PATH = '/usr/bin/chromium';

export const CHROMIUM_BASE_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
] as const;

export interface Chromium {
  readonly context: BrowserContext;
  /** The fresh profile folder (--user-data-dir), removed by close(). */
  readonly profile: string;
  newPage(url: string): Promise<Page>;
  close(): Promise<void>;
}

export async function launchChromiumWith(options: { args?: readonly string[]; viewport?: { width: number; height: number }; colorScheme?: 'light' | 'dark' } = {}): Promise<Chromium> {
  const profile = mkdtempSync(join(tmpdir(), 'svc-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM_PATH,
    headless: true,
    args: [...CHROMIUM_BASE_ARGS, ...(options.args ?? [])],
    ...(options.viewport ? { viewport: options.viewport } : {}),
    ...(options.colorScheme ? { colorScheme: options.colorScheme } : {}),
  });
  return {
    context,
    profile,
    async newPage(url) {
      const page = await context.newPage();
      await page.goto(url);
      return page;
    },
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
