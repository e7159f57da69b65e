/**
 * Local stand-in for the OpenAI Chat Completions API (`POST /v1/chat/completions`), speaking the
 * real wire protocol: bearer auth with OpenAI's 401 bodies, the request validation errors the API
 * gives for broken tool-call histories, SSE `data:` chunks of `chat.completion.chunk` objects
 * ended by `data: [DONE]`, the usage-only chunk of `stream_options.include_usage`, tool calls
 * streamed as many `tool_calls[].function.arguments` deltas, and `finish_reason: "length"` when
 * `max_tokens` / `max_completion_tokens` cuts the answer.
 *
 * What it cannot do is think: replies are scripted (a queue or a function of the request).
 * Token counts are whitespace-separated words, not BPE tokens; the count is deterministic,
 * which is all the tests need.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { RealClock, type Clock } from '../../core/clock.ts';

export interface FakeToolCall {
  /** Defaults to `call_<n>`. */
  readonly id?: string;
  readonly name: string;
  /** JSON string, streamed in pieces of `argumentChunkChars`. */
  readonly arguments: string;
}

export interface FakeChatReply {
  readonly text?: string;
  readonly toolCalls?: readonly FakeToolCall[];
  /** Overrides the natural finish reason (`stop`, `tool_calls` or `length`). */
  readonly finishReason?: string;
}

export interface ChatRequestRecord {
  readonly body: Record<string, any>;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  /** `clock.now()` when the request body had arrived. */
  readonly receivedAtMs: number;
  /** `clock.now()` when the first content chunk (after the role chunk) was written. */
  firstChunkAtMs?: number;
}

export const OPENAI_FAKE_DEFAULTS = {
  /** The only key the fake accepts (`Authorization: Bearer <apiKey>`). */
  apiKey: 'sk-fake-openai-key',
  /** Model name echoed in chunks when the request names none. */
  model: 'gpt-4o-mini',
  /** Delay between receiving the request and the first content chunk. */
  firstTokenDelayMs: 0,
  /** Delay between consecutive chunks after the first. */
  tokenIntervalMs: 0,
  /** Characters of tool-call arguments per delta (small, so consumers must accumulate). */
  argumentChunkChars: 7,
  /** Close the TCP connection after this many data chunks (fault injection); undefined = never. */
  dropAfterChunks: undefined as number | undefined,
  /** Send a truncated, unparseable `data:` line in place of this chunk (fault injection); undefined = never. */
  malformedChunkAt: undefined as number | undefined,
} as const;

export interface OpenAIFakeOptions {
  readonly apiKey?: string;
  readonly model?: string;
  readonly firstTokenDelayMs?: number;
  readonly tokenIntervalMs?: number;
  readonly argumentChunkChars?: number;
  readonly dropAfterChunks?: number;
  readonly malformedChunkAt?: number;
  /** Scripted replies consumed in order; when empty, `respond` (or the echo default) answers. */
  readonly replies?: readonly FakeChatReply[];
  /** Computes a reply from the request body. Default: `You said: <last user message>.` */
  readonly respond?: (body: Record<string, any>) => FakeChatReply;
  /** Time source for the latencies (a VirtualClock makes them advance only when told to). */
  readonly clock?: Clock;
}

export interface OpenAIFake {
  /** Base URL to give the SDK (`http://127.0.0.1:<port>/v1`). */
  readonly baseURL: string;
  readonly apiKey: string;
  /** Every chat request that passed auth, in arrival order. */
  readonly requests: ChatRequestRecord[];
  /** Streams the client closed before the fake finished writing them. */
  readonly clientAborts: number;
  /** Queues more scripted replies. */
  enqueue(...replies: FakeChatReply[]): void;
  /** The next `count` requests fail with `status` (OpenAI error body); 429/5xx are what the SDK retries. */
  failNext(count: number, status: number): void;
  setFaults(faults: { dropAfterChunks?: number | undefined; malformedChunkAt?: number | undefined; stallAfterChunks?: number | undefined }): void;
  close(): Promise<void>;
}

type Chunk = Record<string, unknown>;

function openAIError(res: ServerResponse, status: number, message: string, type: string, code: string | null, param: string | null = null): void {
  const body = JSON.stringify({ error: { message, type, param, code } });
  res.writeHead(status, { 'content-type': 'application/json', 'x-request-id': `req_${Date.now().toString(36)}` });
  res.end(body);
}

function words(text: string): string[] {
  return text.split(/\s+/).filter(Boolean);
}

/** Splits text into word-sized deltas that keep their leading space, as models stream them. */
function textDeltas(text: string): string[] {
  return text.match(/\s*\S+/g) ?? (text ? [text] : []);
}

function countPromptTokens(body: Record<string, any>): number {
  let n = 0;
  for (const m of body.messages as Array<Record<string, any>>) {
    if (typeof m.content === 'string') n += words(m.content).length;
    for (const tc of m.tool_calls ?? []) n += words(String(tc.function?.arguments ?? '')).length + 1;
    n += 3; // per-message framing, as the real tokenizer adds
  }
  return n;
}

/** The checks the real API makes on a conversation with tool calls (same messages, same typo). */
function validateMessages(messages: unknown): string | undefined {
  if (!Array.isArray(messages) || messages.length === 0) return "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.";
  const pending = new Set<string>();
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i] as Record<string, any>;
    if (!m || typeof m !== 'object' || !['system', 'developer', 'user', 'assistant', 'tool'].includes(m.role)) {
      return `Invalid value: '${m?.role}'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.`;
    }
    if (m.role === 'tool') {
      if (typeof m.tool_call_id !== 'string') return `Missing required parameter: 'messages[${i}].tool_call_id'.`;
      if (!pending.has(m.tool_call_id)) return "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.";
      pending.delete(m.tool_call_id);
      continue;
    }
    if (pending.size > 0) {
      return `An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: ${[...pending].join(', ')}`;
    }
    if (m.role === 'assistant') for (const tc of m.tool_calls ?? []) pending.add(tc.id);
  }
  return undefined;
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => resolve(Buffer.concat(parts).toString('utf8')));
    req.on('error', reject);
  });
}

export async function startOpenAIFake(options: OpenAIFakeOptions = {}): Promise<OpenAIFake> {
  const cfg = { ...OPENAI_FAKE_DEFAULTS, ...options };
  const clock = options.clock ?? new RealClock();
  const queue: FakeChatReply[] = [...(options.replies ?? [])];
  const requests: ChatRequestRecord[] = [];
  const sockets = new Set<Socket>();
  let faults = { dropAfterChunks: options.dropAfterChunks as number | undefined, malformedChunkAt: options.malformedChunkAt as number | undefined, stallAfterChunks: undefined as number | undefined };
  let failures: { count: number; status: number } = { count: 0, status: 500 };
  let clientAborts = 0;
  let completionSeq = 0;

  const respond = options.respond ?? ((body: Record<string, any>): FakeChatReply => {
    const lastUser = [...body.messages].reverse().find((m: any) => m.role === 'user');
    return { text: `You said: ${lastUser?.content ?? ''}.` };
  });

  async function handleChat(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let body: Record<string, any>;
    try {
      body = JSON.parse(await readBody(req));
    } catch {
      return openAIError(res, 400, "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)", 'invalid_request_error', null);
    }
    if (!body || typeof body !== 'object') return openAIError(res, 400, 'Invalid body', 'invalid_request_error', null);
    if (typeof body.model !== 'string') return openAIError(res, 400, 'you must provide a model parameter', 'invalid_request_error', null);
    const invalid = validateMessages(body.messages);
    if (invalid) return openAIError(res, 400, invalid, 'invalid_request_error', null, 'messages');
    const record: ChatRequestRecord = { body, headers: req.headers, receivedAtMs: clock.now() };
    requests.push(record);

    if (failures.count > 0) {
      failures.count--;
      res.setHeader('retry-after-ms', '5');
      if (failures.status === 429) return openAIError(res, 429, 'Rate limit reached for requests', 'requests', 'rate_limit_exceeded');
      return openAIError(res, failures.status, 'The server had an error while processing your request. Sorry about that!', 'server_error', null);
    }

    const reply = queue.shift() ?? respond(body);
    const limit: number | undefined = body.max_completion_tokens ?? body.max_tokens ?? undefined;
    let text = reply.text ?? '';
    let truncated = false;
    if (limit !== undefined && words(text).length > limit) {
      text = textDeltas(text).slice(0, limit).join('');
      truncated = true;
    }
    const toolCalls = truncated ? [] : (reply.toolCalls ?? []).map((tc, i) => ({ ...tc, id: tc.id ?? `call_${completionSeq}_${i}` }));
    const finishReason = reply.finishReason ?? (truncated ? 'length' : toolCalls.length ? 'tool_calls' : 'stop');
    const usage = {
      prompt_tokens: countPromptTokens(body),
      completion_tokens: words(text).length + toolCalls.reduce((n, tc) => n + words(tc.arguments).length + 1, 0),
      total_tokens: 0,
      prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
    };
    usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
    const id = `chatcmpl-fake${++completionSeq}`;
    const created = Math.floor(Date.now() / 1000);
    const model = body.model ?? cfg.model;

    if (!body.stream) {
      if (cfg.firstTokenDelayMs > 0) await clock.sleep(cfg.firstTokenDelayMs);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({
        id, object: 'chat.completion', created, model, system_fingerprint: 'fp_fake',
        choices: [{
          index: 0,
          message: {
            role: 'assistant', content: toolCalls.length && !text ? null : text, refusal: null,
            ...(toolCalls.length ? { tool_calls: toolCalls.map((tc) => ({ id: tc.id, type: 'function', function: { name: tc.name, arguments: tc.arguments } })) } : {}),
          },
          logprobs: null, finish_reason: finishReason,
        }],
        usage,
      }));
      return;
    }

    const includeUsage = body.stream_options?.include_usage === true;
    const base = { id, object: 'chat.completion.chunk', created, model, system_fingerprint: 'fp_fake', ...(includeUsage ? { usage: null } : {}) };
    const choice = (delta: Record<string, unknown>, finish: string | null = null) => ({ ...base, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] });
    const chunks: Chunk[] = [choice({ role: 'assistant', content: '', refusal: null })];
    for (const piece of textDeltas(text)) chunks.push(choice({ content: piece }));
    toolCalls.forEach((tc, index) => {
      chunks.push(choice({ tool_calls: [{ index, id: tc.id, type: 'function', function: { name: tc.name, arguments: '' } }] }));
      for (let at = 0; at < tc.arguments.length; at += cfg.argumentChunkChars) {
        chunks.push(choice({ tool_calls: [{ index, function: { arguments: tc.arguments.slice(at, at + cfg.argumentChunkChars) } }] }));
      }
    });
    chunks.push(choice({}, finishReason));
    if (includeUsage) chunks.push({ ...base, choices: [], usage });

    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive' });
    let finished = false;
    res.on('close', () => {
      if (!finished) clientAborts++;
    });
    const abort = new AbortController();
    res.on('close', () => abort.abort());
    try {
      if (cfg.firstTokenDelayMs > 0) await clock.sleep(cfg.firstTokenDelayMs, abort.signal);
      for (let i = 0; i < chunks.length; i++) {
        if (i > 0 && cfg.tokenIntervalMs > 0) await clock.sleep(cfg.tokenIntervalMs, abort.signal);
        if (faults.stallAfterChunks !== undefined && i >= faults.stallAfterChunks) {
          // A server that stops sending mid-answer, the connection left open, until the client gives up.
          await new Promise<void>((resolve) => (abort.signal.aborted ? resolve() : abort.signal.addEventListener('abort', () => resolve(), { once: true })));
          return;
        }
        if (faults.dropAfterChunks !== undefined && i >= faults.dropAfterChunks) {
          finished = true; // the server's own fault, not a client abort
          req.socket.destroy();
          return;
        }
        // Wait for the bytes to leave, so a later injected drop cuts after them, not before.
        if (i === 1) record.firstChunkAtMs = clock.now();
        const data = JSON.stringify(chunks[i]);
        const out = i === faults.malformedChunkAt ? data.slice(0, 30) : data;
        await new Promise<void>((resolve) => res.write(`data: ${out}\n\n`, () => resolve()));
      }
      finished = true;
      res.end('data: [DONE]\n\n');
    } catch {
      // client went away during a delay; nothing left to write
    }
  }

  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://fake');
    const auth = req.headers.authorization;
    if (!auth) {
      return openAIError(res, 401, "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if you're accessing the API from your browser and are prompted for a username and password. You can obtain an API key from https://platform.openai.com/account/api-keys.", 'invalid_request_error', null);
    }
    const key = auth.replace(/^Bearer\s+/i, '');
    if (key !== cfg.apiKey) {
      const masked = key.length > 8 ? `${key.slice(0, 3)}*****${key.slice(-4)}` : key;
      return openAIError(res, 401, `Incorrect API key provided: ${masked}. You can find your API key at https://platform.openai.com/account/api-keys.`, 'invalid_request_error', 'invalid_api_key');
    }
    if (req.method === 'POST' && url.pathname === '/v1/chat/completions') {
      handleChat(req, res).catch(() => res.destroy());
      return;
    }
    if (req.method === 'GET' && url.pathname === '/v1/models') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [{ id: cfg.model, object: 'model', created: 0, owned_by: 'fake' }] }));
      return;
    }
    openAIError(res, 404, `Invalid URL (${req.method} ${url.pathname})`, 'invalid_request_error', null);
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    baseURL: `http://127.0.0.1:${port}/v1`,
    apiKey: cfg.apiKey,
    requests,
    get clientAborts() {
      return clientAborts;
    },
    enqueue: (...replies) => void queue.push(...replies),
    failNext: (count, status) => void (failures = { count, status }),
    setFaults: (f) => void (faults = { ...faults, ...f }),
    close: () => new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy();
      server.close(() => resolve());
    }),
  };
}
