/**
 * A local stand-in for the OpenAI Models REST API (`GET /v1/models`, `GET /v1/models/{model}`)
 * speaking its real shapes: Bearer auth, the model object, and the error envelope
 * `{ error: { message, type, param, code } }` with 401 `invalid_api_key` and 404
 * `model_not_found`. Tests point the openai SDK at `baseURL` to exercise credential checks.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface FakeOpenAIModelsOptions {
  /** Keys the fake accepts. */
  validKeys: string[];
  /** Model ids that exist. */
  models: string[];
}

export interface FakeOpenAIModels {
  /** Pass to the SDK as `baseURL` (ends in /v1). */
  baseURL: string;
  /** Every request seen: method, path and the bearer token presented. */
  requests: Array<{ method: string; path: string; token: string | null }>;
  close(): Promise<void>;
}

const CREATED = 1_715_367_049;

export async function startFakeOpenAIModels(options: FakeOpenAIModelsOptions): Promise<FakeOpenAIModels> {
  const requests: FakeOpenAIModels['requests'] = [];
  const server: Server = createServer((req: IncomingMessage, res) => {
    const path = new URL(req.url ?? '/', 'http://fake').pathname;
    const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1] ?? null;
    requests.push({ method: req.method ?? 'GET', path, token });
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json', 'x-request-id': `req_${requests.length}` });
      res.end(JSON.stringify(body));
    };
    if (!token || !options.validKeys.includes(token)) {
      const shown = token ? `${token.slice(0, 3)}*****${token.slice(-4)}` : '';
      return send(401, {
        error: {
          message: token
            ? `Incorrect API key provided: ${shown}. You can find your API key at https://platform.openai.com/account/api-keys.`
            : "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
          type: 'invalid_request_error',
          param: null,
          code: token ? 'invalid_api_key' : null,
        },
      });
    }
    if (req.method === 'GET' && path === '/v1/models') {
      return send(200, { object: 'list', data: options.models.map((id) => ({ id, object: 'model', created: CREATED, owned_by: 'system' })) });
    }
    const match = /^\/v1\/models\/(.+)$/.exec(path);
    if (req.method === 'GET' && match) {
      const id = decodeURIComponent(match[1]!);
      if (!options.models.includes(id)) {
        return send(404, {
          error: { message: `The model '${id}' does not exist or you do not have access to it.`, type: 'invalid_request_error', param: null, code: 'model_not_found' },
        });
      }
      return send(200, { id, object: 'model', created: CREATED, owned_by: 'system' });
    }
    send(404, { error: { message: `Invalid URL (${req.method} ${path})`, type: 'invalid_request_error', param: null, code: null } });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseURL: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
