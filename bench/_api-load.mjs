// Load generator for bench/api.ts, run in a worker thread so it never shares the server's
// event loop. Keeps `connections` keep-alive sockets, one request in flight on each, for
// `warmupMs` then `durationMs` on the same sockets, reporting only the second part: a fresh
// worker's code is cold (interpreted) and so is a new connection's on the server, which showed as
// a burst of slow requests in the first half second of every run. Requests are written and
// responses parsed by hand over raw sockets: node's http client cost about a third of a core at
// 2,000 req/s, CPU this 2-core machine's server and PostgreSQL need. Every response is read
// whole (Content-Length) and its status checked.
import { parentPort, workerData } from 'node:worker_threads';
import net from 'node:net';

const { baseUrl, key, connections, warmupMs, durationMs, scenario, agentId, ratePerSecond } = workerData;
const url = new URL(baseUrl);
const HEAD_END = Buffer.from('\r\n\r\n');

function requestBytes(method, path, body) {
  const payload = body === undefined ? '' : JSON.stringify(body);
  const head = `${method} ${path} HTTP/1.1\r\nHost: ${url.host}\r\nX-API-Key: ${key}\r\n` +
    (payload ? `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(payload)}\r\n` : '') + '\r\n';
  return Buffer.from(head + payload, 'utf8');
}

/** One keep-alive connection: `send(bytes)` resolves with `{ status, body }` of the next response. */
function connection() {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: url.hostname, port: Number(url.port), noDelay: true });
    let buffer = Buffer.alloc(0);
    let pending = null;
    socket.on('data', (chunk) => {
      buffer = buffer.length ? Buffer.concat([buffer, chunk]) : chunk;
      const headEnd = buffer.indexOf(HEAD_END);
      if (headEnd < 0 || !pending) return;
      const head = buffer.toString('latin1', 0, headEnd);
      if (/\r\ntransfer-encoding:/i.test(head)) {
        pending.reject(new Error('chunked responses are not expected from the API'));
        return;
      }
      const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
      if (buffer.length < headEnd + 4 + length) return;
      const status = Number(head.slice(9, 12));
      const body = buffer.toString('utf8', headEnd + 4, headEnd + 4 + length);
      buffer = buffer.subarray(headEnd + 4 + length);
      const done = pending;
      pending = null;
      done.resolve({ status, body });
    });
    socket.on('error', (err) => {
      if (pending) pending.reject(err);
      else reject(err);
    });
    socket.once('connect', () => resolve({
      send: (bytes) => new Promise((res, rej) => {
        pending = { resolve: res, reject: rej };
        socket.write(bytes);
      }),
      close: () => socket.destroy(),
    }));
  });
}

const getAgent = requestBytes('GET', `/v1/agents/${agentId}`);
const listAgents = requestBytes('GET', '/v1/agents?limit=20');
const createAgent = requestBytes('POST', '/v1/agents', { title: 'bench agent' });

async function once(conn) {
  if (scenario === 'get_agent') return (await conn.send(getAgent)).status === 200;
  if (scenario === 'list_agents') return (await conn.send(listAgents)).status === 200;
  const created = await conn.send(createAgent);
  if (created.status !== 201) return false;
  const id = JSON.parse(created.body).agent_id;
  return (await conn.send(requestBytes('DELETE', `/v1/agents/${id}`))).status === 204;
}

const latencies = [];
let errors = 0;
const conns = await Promise.all(Array.from({ length: connections }, () => connection()));
const warmupStarted = performance.now();
const started = warmupStarted + warmupMs;
const deadline = started + durationMs;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
await Promise.all(
  conns.map(async (conn, c) => {
    // Fixed rate: each connection owns a slot of the schedule; latency counts from the scheduled
    // send time, so a stalled server cannot hide queueing (no coordinated omission).
    const periodMs = ratePerSecond ? (1000 * connections) / ratePerSecond : 0;
    let scheduled = warmupStarted + (periodMs * c) / connections;
    while (performance.now() < deadline) {
      if (periodMs) {
        const wait = scheduled - performance.now();
        if (wait > 0) await sleep(wait);
      }
      const t0 = periodMs ? scheduled : performance.now();
      const ok = await once(conn).catch(() => false);
      if (t0 >= started) {
        latencies.push(performance.now() - t0);
        if (!ok) errors++;
      }
      scheduled += periodMs;
    }
  }),
);
const elapsedMs = performance.now() - started;
for (const conn of conns) conn.close();
parentPort.postMessage({ latencies, errors, elapsedMs });
