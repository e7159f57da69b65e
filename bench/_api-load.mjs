// Load generator for bench/api.ts, run in a worker thread so it never shares the server's
// event loop. Keeps `connections` requests in flight over keep-alive sockets for `durationMs`.
import { parentPort, workerData } from 'node:worker_threads';
import http from 'node:http';

const { baseUrl, key, connections, durationMs, scenario, agentId, ratePerSecond } = workerData;
const agent = new http.Agent({ keepAlive: true, maxSockets: connections });
const url = new URL(baseUrl);

function request(method, path, body) {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const req = http.request(
      { host: url.hostname, port: url.port, method, path, agent, headers: { 'x-api-key': key, ...(payload ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } : {}) } },
      (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString() }));
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

async function once() {
  if (scenario === 'get_agent') {
    const r = await request('GET', `/v1/agents/${agentId}`);
    return r.status === 200;
  }
  if (scenario === 'list_agents') {
    const r = await request('GET', '/v1/agents?limit=20');
    return r.status === 200;
  }
  const created = await request('POST', '/v1/agents', { title: 'bench agent' });
  if (created.status !== 201) return false;
  const id = JSON.parse(created.body).agent_id;
  const deleted = await request('DELETE', `/v1/agents/${id}`);
  return deleted.status === 204;
}

const latencies = [];
let errors = 0;
const started = performance.now();
const deadline = started + durationMs;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
await Promise.all(
  Array.from({ length: connections }, async (_, c) => {
    // Fixed rate: each connection owns a slot of the schedule; latency counts from the scheduled
    // send time, so a stalled server cannot hide queueing (no coordinated omission).
    const periodMs = ratePerSecond ? (1000 * connections) / ratePerSecond : 0;
    let scheduled = started + (periodMs * c) / connections;
    while (performance.now() < deadline) {
      if (periodMs) {
        const wait = scheduled - performance.now();
        if (wait > 0) await sleep(wait);
      }
      const t0 = periodMs ? scheduled : performance.now();
      const ok = await once().catch(() => false);
      latencies.push(performance.now() - t0);
      if (!ok) errors++;
      scheduled += periodMs;
    }
  }),
);
const elapsedMs = performance.now() - started;
agent.destroy();
parentPort.postMessage({ latencies, errors, elapsedMs });
