/**
 * Delivers tool calls to webhooks: one POST per call, to the address the SSRF check approved.
 *
 * Body: `{ tool_call_message: { name, parameters, tool_call_id, response_required, tool_type },
 * ...session metadata }` (see docs/tools.md for the metadata fields). No signature header is sent
 * (the spec says webhooks are unsigned). Redirects are never followed: a 3xx is an error result,
 * since following one would let a public URL bounce the request to a private address.
 */
import http from 'node:http';
import https from 'node:https';
import { rootCertificates } from 'node:tls';
import type { LookupFunction } from 'node:net';
import { RealClock, type Clock, type TimerHandle } from '../../core/clock.ts';
import { resolveOptions } from '../../core/options.ts';
import { AddressPolicy } from './address-policy.ts';
import { resolveWebhookTarget, systemResolver, type HostResolver, type WebhookTarget } from './webhook-target.ts';

export const WEBHOOK_DEFAULTS = {
  /** Whole exchange (connect, send, status, body) must finish within this; spec: 30 s. */
  timeoutMs: 30_000,
  /** DNS resolution of a webhook host must finish within this (system resolvers can hang). */
  resolveTimeoutMs: 5_000,
  /** Response bodies longer than this are an error result; the rest is never read into memory. */
  maxResponseBytes: 1_048_576,
  /** CIDRs the operator opens for webhooks despite the SSRF policy; none by default. */
  allowedRanges: [] as readonly string[],
  /** Sent as User-Agent so receivers can recognise the caller. */
  userAgent: 'svc-tool-webhook/1',
} as const;

export interface WebhookClientOptions {
  readonly timeoutMs?: number;
  readonly resolveTimeoutMs?: number;
  readonly maxResponseBytes?: number;
  readonly allowedRanges?: readonly string[];
  readonly userAgent?: string;
  /**
   * Extra CA certificates (PEM) trusted for https webhooks, on top of Node's bundled roots: for
   * operators whose webhooks live behind a private CA. Certificates are always verified.
   */
  readonly extraCaCertificates?: readonly string[];
  readonly resolver?: HostResolver;
  readonly clock?: Clock;
}

/**
 * Session fields sent beside `tool_call_message`. `client_user_ref` is the opaque end-user id
 * given at session start (null when none was given).
 */
export interface WebhookSessionMetadata {
  readonly session_id: string;
  readonly agent_id: string;
  readonly call_id: string;
  readonly client_user_ref: string | null;
}

export interface WebhookRequest {
  readonly name: string;
  readonly toolCallId: string;
  /** The arguments as the model wrote them: a JSON string, forwarded unchanged. */
  readonly arguments: string;
  readonly responseRequired: boolean;
  readonly metadata: WebhookSessionMetadata;
}

export type WebhookOutcome =
  | { readonly ok: true; readonly status: number; readonly result: unknown }
  | { readonly ok: false; readonly status?: number; readonly code: WebhookFailureCode; readonly error: string };

export type WebhookFailureCode =
  | 'http_status'
  | 'redirect'
  | 'timeout'
  | 'too_large'
  | 'unparseable'
  | 'network'
  | 'aborted';

export function webhookBody(request: WebhookRequest): string {
  return JSON.stringify({
    tool_call_message: {
      name: request.name,
      parameters: request.arguments,
      tool_call_id: request.toolCallId,
      response_required: request.responseRequired,
      tool_type: 'function',
    },
    ...request.metadata,
  });
}

export class WebhookClient {
  readonly policy: AddressPolicy;
  private readonly timeoutMs: number;
  private readonly resolveTimeoutMs: number;
  private readonly maxResponseBytes: number;
  private readonly userAgent: string;
  private readonly resolver: HostResolver;
  private readonly clock: Clock;
  private readonly ca: string[] | undefined;

  constructor(options: WebhookClientOptions = {}) {
    const settings = resolveOptions(WEBHOOK_DEFAULTS, options);
    this.policy = new AddressPolicy(settings.allowedRanges);
    ({ timeoutMs: this.timeoutMs, resolveTimeoutMs: this.resolveTimeoutMs, maxResponseBytes: this.maxResponseBytes, userAgent: this.userAgent } = settings);
    this.resolver = options.resolver ?? systemResolver;
    this.clock = options.clock ?? new RealClock();
    // Node's `ca` option replaces the bundled roots, so extra CAs are appended to them.
    this.ca = options.extraCaCertificates?.length ? [...rootCertificates, ...options.extraCaCertificates] : undefined;
  }

  /** Checks a URL against the SSRF policy; throws `WebhookRefusedError` when refused. */
  resolve(url: string): Promise<WebhookTarget> {
    const { clock, resolveTimeoutMs, resolver } = this;
    const bounded: HostResolver = (hostname) =>
      new Promise((resolve, reject) => {
        const timer = clock.setTimeout(() => reject(Object.assign(new Error('DNS lookup timed out'), { code: 'ETIMEOUT' })), resolveTimeoutMs);
        resolver(hostname).then(
          (answers) => {
            clock.clearTimeout(timer);
            resolve(answers);
          },
          (err: unknown) => {
            clock.clearTimeout(timer);
            reject(err);
          },
        );
      });
    return resolveWebhookTarget(url, this.policy, bounded);
  }

  /**
   * POSTs one call to an already checked target. Never throws: every failure is an outcome the
   * dispatcher turns into an error result for the model.
   */
  send(target: WebhookTarget, request: WebhookRequest, signal?: AbortSignal): Promise<WebhookOutcome> {
    const body = Buffer.from(webhookBody(request), 'utf8');
    return new Promise<WebhookOutcome>((resolve) => {
      let settled = false;
      let timer: TimerHandle | undefined;
      let req: http.ClientRequest | undefined;
      const onAbort = () => fail('aborted', 'webhook call was cancelled');
      const finish = (outcome: WebhookOutcome) => {
        if (settled) return;
        settled = true;
        this.clock.clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        resolve(outcome);
      };
      function fail(code: WebhookFailureCode, error: string, status?: number): void {
        finish(status === undefined ? { ok: false, code, error } : { ok: false, code, error, status });
        req?.destroy();
      }

      if (signal?.aborted) return onAbort();
      try {
        req = (target.url.protocol === 'https:' ? https : http).request(this.requestOptions(target, body.length));
      } catch (err) {
        return fail('network', `webhook request could not be made: ${(err as Error).message}`);
      }
      timer = this.clock.setTimeout(() => fail('timeout', `webhook did not answer within ${this.timeoutMs} ms`), this.timeoutMs);
      signal?.addEventListener('abort', onAbort, { once: true });

      req.on('error', (err: NodeJS.ErrnoException) => fail('network', `webhook request failed: ${err.code ?? err.message}`));
      req.on('response', (res) => {
        const status = res.statusCode ?? 0;
        if (status >= 300 && status < 400) {
          const location = res.headers.location ? ` to ${res.headers.location}` : '';
          return fail('redirect', `webhook answered with a redirect (HTTP ${status}${location}); redirects are not followed`, status);
        }
        if (status < 200 || status >= 300) return fail('http_status', `webhook answered HTTP ${status}`, status);
        if (!request.responseRequired) {
          // Fire-and-forget: the answer is ignored, so do not spend memory reading it.
          finish({ ok: true, status, result: null });
          res.destroy();
          return;
        }
        const declared = Number(res.headers['content-length']);
        if (Number.isFinite(declared) && declared > this.maxResponseBytes) {
          return fail('too_large', `webhook response of ${declared} bytes exceeds the ${this.maxResponseBytes} byte limit`, status);
        }
        const chunks: Buffer[] = [];
        let received = 0;
        res.on('data', (chunk: Buffer) => {
          received += chunk.length;
          if (received > this.maxResponseBytes) {
            return fail('too_large', `webhook response exceeds the ${this.maxResponseBytes} byte limit`, status);
          }
          chunks.push(chunk);
        });
        res.on('error', (err: NodeJS.ErrnoException) => fail('network', `webhook response failed: ${err.code ?? err.message}`, status));
        res.on('end', () => finish(interpretBody(status, Buffer.concat(chunks).toString('utf8'))));
      });
      req.end(body);
    });
  }

  private requestOptions(target: WebhookTarget, contentLength: number): https.RequestOptions {
    const { url } = target;
    return {
      protocol: url.protocol,
      hostname: target.hostname,
      port: url.port === '' ? undefined : Number(url.port),
      path: `${url.pathname}${url.search}`,
      method: 'POST',
      auth: url.username ? `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}` : undefined,
      headers: {
        'Content-Type': 'application/json',
        'Content-Length': String(contentLength),
        Accept: 'application/json',
        'User-Agent': this.userAgent,
      },
      // The checked address, handed back for the original name: no second lookup happens,
      // while Host and TLS servername (SNI + certificate check) keep the name from the URL.
      lookup: pinnedLookup(target),
      agent: false,
      ...(this.ca ? { ca: this.ca } : {}),
    };
  }
}

/** Applies the spec's result rules to a 2xx answer of a call that waits for its response. */
export function interpretBody(status: number, text: string): WebhookOutcome {
  if (status === 204 || text.trim() === '') return { ok: true, status, result: '' };
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return { ok: false, status, code: 'unparseable', error: 'webhook response is not valid JSON' };
  }
  if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed) && Object.hasOwn(parsed, 'result')) {
    return { ok: true, status, result: (parsed as { result: unknown }).result };
  }
  return { ok: true, status, result: parsed };
}

function pinnedLookup(target: WebhookTarget): LookupFunction {
  return ((_hostname: string, options: { all?: boolean }, callback: (...args: unknown[]) => void) => {
    if (options?.all) callback(null, [{ address: target.address, family: target.family }]);
    else callback(null, target.address, target.family);
  }) as LookupFunction;
}
