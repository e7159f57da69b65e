import test from 'ava';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Starts `tsx server/main.ts` and resolves with its banner once it printed the URLs. */
function start(dataDir: string): Promise<{ child: ChildProcess; out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import=tsx', 'server/main.ts'], {
      env: { ...process.env, PORT: '0', HOST: '127.0.0.1', DATABASE_URL: '', SVC_DATA_DIR: dataDir, LOG_LEVEL: 'silent' },
    });
    let out = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`no banner: ${out}`));
    }, 60_000);
    child.stdout!.on('data', (d) => {
      out += d;
      if (/Reference:.*\n/.test(out) && (/Try: curl.*\n/.test(out) || !out.includes('First start'))) {
        setTimeout(() => {
          clearTimeout(timer);
          resolve({ child, out });
        }, 200);
      }
    });
    child.stderr!.on('data', (d) => (out += d));
    child.on('exit', (code) => reject(new Error(`exited ${code}: ${out}`)));
  });
}

const stop = (child: ChildProcess) => new Promise<void>((resolve) => {
  child.removeAllListeners('exit');
  child.once('exit', () => resolve());
  child.kill('SIGTERM');
});

test('npm start prints its URLs and, on an empty database only, a working demo key', async (t) => {
  t.timeout(240_000); // two start-ups of the whole server (each bounded at 60 s by start())
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-main-'));
  const started: ChildProcess[] = [];
  // A failed assertion ends the test before its own stop(): the servers are stopped here whatever happens.
  t.teardown(() => {
    for (const child of started) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  try {
    const first = await start(dataDir);
    started.push(first.child);
    const url = /REST API:\s+(\S+)/.exec(first.out)![1]!;
    t.regex(first.out, /OpenAPI:\s+http:\/\/127\.0\.0\.1:\d+\/v1\/openapi\.json/);
    t.regex(first.out, /Reference:\s+http:\/\/127\.0\.0\.1:\d+\/v1\/docs/);
    const key = /^\s+(svc_[A-Za-z0-9_-]{43})$/m.exec(first.out)?.[1];
    t.truthy(key, first.out);
    const res = await fetch(`${url}/agents`, { headers: { 'x-api-key': key! } });
    t.is(res.status, 200);
    const variants = await (await fetch(`${url}/model-variants`, { headers: { 'x-api-key': key! } })).json();
    t.true(variants.data.some((v: any) => v.model_variant_id === 'svc/human-portrait/v1'), 'the face plugin seeded the catalogue');
    const plugins = /plugins:\s+(.*)/.exec(first.out)?.[1]?.split(', ') ?? [];
    for (const name of ['local', 'face', 'openai', 'deepgram', 'elevenlabs', 'cartesia', 'openai-realtime', 'elevenlabs-convai']) t.true(plugins.includes(name), `plugin ${name} loaded: ${plugins.join(', ')}`);
    t.is(first.out.match(/^\s+Speech:/gm)?.length, 1, 'the speech line once');
    t.is(first.out.match(/^\s+Voices:/gm)?.length, 1, 'the voices line once');
    const agent = await fetch(`${url}/agents`, { method: 'POST', headers: { 'x-api-key': key!, 'content-type': 'application/json' }, body: JSON.stringify({ title: 'default tts' }) });
    t.is(agent.status, 201);
    const bad = await fetch(`${url}/agents`, { method: 'POST', headers: { 'x-api-key': key!, 'content-type': 'application/json' }, body: JSON.stringify({ title: 'x', tts_provider: 'nope' }) });
    t.deepEqual(((await bad.json()) as any).details.known, ['cartesia', 'deepgram', 'elevenlabs', 'local', 'openai'], 'every text-to-speech plugin loaded by npm start is named');
    // The embedded WebRTC rooms are mounted: the browser client script is served.
    t.regex(first.out, /WebRTC:\s+ws:\/\/127\.0\.0\.1:\d+\/v1\/rooms\/signal/);
    const client = await fetch(`${url}/rooms/client.js`);
    t.is(client.status, 200);
    t.regex(client.headers.get('content-type') ?? '', /javascript/);
    t.regex(await client.text(), /signal|RTCPeerConnection/);
    await stop(first.child);

    const second = await start(dataDir);
    started.push(second.child);
    t.false(second.out.includes('First start'));
    t.false(/svc_[A-Za-z0-9_-]{43}/.test(second.out));
    const url2 = /REST API:\s+(\S+)/.exec(second.out)![1]!;
    t.is((await fetch(`${url2}/agents`, { headers: { 'x-api-key': key! } })).status, 200, 'the demo key survives restarts');
    await stop(second.child);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});
