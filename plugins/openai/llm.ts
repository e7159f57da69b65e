/**
 * `LLMService` over the OpenAI Chat Completions streaming API, through the official `openai`
 * SDK. Works with any OpenAI-compatible server (vLLM, llama.cpp, Ollama, LM Studio, ...) given
 * its base URL. Tool-call deltas are passed on as they arrive; accumulating them into complete
 * calls is the LLM processor's job, so every vendor gets the same accumulation.
 */
import OpenAI, { APIConnectionError, APIError, APIUserAbortError } from 'openai';
import type { ChatCompletionCreateParamsStreaming } from 'openai/resources/chat/completions';
import { abortError } from '../../core/clock.ts';
import type { LLMEvent, LLMRequest, LLMService } from '../../processors/services.ts';
import { resolveOptions } from '../../core/options.ts';
import { codeForHttpStatus } from '../../core/provider-error.ts';
import { OpenAILLMError } from './errors.ts';
import { toChatMessages, toChatTools } from './messages.ts';

/** A plain message, not `signal.reason`: a DOMException is not a native Error for every consumer. */
const ABORTED = 'LLM request aborted';

export const OPENAI_LLM_DEFAULTS = {
  /** Model name sent with every request. */
  model: 'gpt-4o-mini',
  /** API root; `OPENAI_BASE_URL` overrides it, and so does the `baseUrl` option. */
  baseUrl: 'https://api.openai.com/v1',
  /** Retries the SDK makes on connection errors, 408/409/429 and 5xx before the stream starts. */
  maxRetries: 2,
  /** Per-request timeout of the SDK: until the response's headers (the SDK clears it then). */
  timeoutMs: 60_000,
  /**
   * Which body field carries the token limit. `auto` sends `max_completion_tokens` to
   * api.openai.com (where `max_tokens` is deprecated and refused by reasoning models) and
   * `max_tokens` to any other server, because most OpenAI-compatible servers only know that one.
   */
  maxTokensParameter: 'auto' as 'auto' | 'max_tokens' | 'max_completion_tokens',
} as const;

export interface OpenAILLMOptions {
  /** Defaults to `OPENAI_API_KEY`. Self-hosted servers often accept any non-empty key. */
  readonly apiKey?: string;
  readonly baseUrl?: string;
  readonly model?: string;
  readonly maxRetries?: number;
  readonly timeoutMs?: number;
  readonly maxTokensParameter?: 'auto' | 'max_tokens' | 'max_completion_tokens';
  readonly organization?: string;
}

export class OpenAILLMService implements LLMService {
  readonly name = 'openai';
  readonly model: string;
  readonly baseUrl: string;
  private readonly client: OpenAI;
  private readonly maxTokensField: 'max_tokens' | 'max_completion_tokens';

  constructor(options: OpenAILLMOptions = {}, env: NodeJS.ProcessEnv = process.env) {
    // OPENAI_BASE_URL sits between the option and the default.
    const settings = resolveOptions(OPENAI_LLM_DEFAULTS, { ...options, baseUrl: options.baseUrl ?? env.OPENAI_BASE_URL });
    this.model = settings.model;
    this.baseUrl = settings.baseUrl;
    const apiKey = options.apiKey ?? env.OPENAI_API_KEY;
    if (!apiKey) {
      throw new OpenAILLMError('key_missing', 'no OpenAI API key: pass the apiKey option or set OPENAI_API_KEY (self-hosted servers accept any placeholder)');
    }
    const field = settings.maxTokensParameter;
    this.maxTokensField = field !== 'auto' ? field : isOfficialApi(this.baseUrl) ? 'max_completion_tokens' : 'max_tokens';
    this.client = new OpenAI({
      apiKey,
      baseURL: this.baseUrl,
      organization: options.organization ?? null,
      maxRetries: settings.maxRetries,
      timeout: settings.timeoutMs,
    });
  }

  async *stream(request: LLMRequest): AsyncIterable<LLMEvent> {
    const { signal } = request;
    if (signal?.aborted) throw abortError(ABORTED);
    const body: ChatCompletionCreateParamsStreaming = {
      model: this.model,
      messages: toChatMessages(request.messages),
      stream: true,
      stream_options: { include_usage: true },
      ...(request.tools?.length ? { tools: toChatTools(request.tools) } : {}),
      ...(request.maxTokens !== undefined ? { [this.maxTokensField]: request.maxTokens } : {}),
      ...(request.temperature !== undefined ? { temperature: request.temperature } : {}),
    };

    let finishReason: string | undefined;
    // A stream that stalls mid-answer is bounded by the LLM processor (LLM_DEFAULTS.streamIdleMs),
    // for every plugin: it aborts the signal, which closes this request's connection.
    try {
      const chunks = await this.client.chat.completions.create(body, { signal });
      for await (const chunk of chunks) {
        if (chunk.usage) {
          yield { type: 'usage', promptTokens: chunk.usage.prompt_tokens, completionTokens: chunk.usage.completion_tokens };
        }
        const choice = chunk.choices?.[0];
        if (!choice) continue;
        if (choice.delta?.content) yield { type: 'text', text: choice.delta.content };
        for (const tc of choice.delta?.tool_calls ?? []) {
          yield {
            type: 'tool-call-delta',
            index: tc.index,
            ...(tc.id ? { id: tc.id } : {}),
            ...(tc.function?.name ? { name: tc.function.name } : {}),
            ...(tc.function?.arguments ? { argumentsDelta: tc.function.arguments } : {}),
          };
        }
        if (choice.finish_reason) finishReason = choice.finish_reason;
      }
    } catch (err) {
      throw translateError(err, signal);
    }
    // The SDK ends iteration quietly when its signal aborts; our contract is to throw.
    if (signal?.aborted) throw abortError(ABORTED);
    if (!finishReason) {
      throw new OpenAILLMError('connection_lost', 'the response stream ended before the model finished (no finish_reason); the answer is incomplete');
    }
    yield { type: 'done', finishReason };
  }
}

function isOfficialApi(baseUrl: string): boolean {
  try {
    return new URL(baseUrl).hostname === 'api.openai.com';
  } catch {
    return false;
  }
}

function translateError(err: unknown, signal: AbortSignal | undefined): Error {
  if (signal?.aborted || err instanceof APIUserAbortError) return abortError(ABORTED);
  if (err instanceof OpenAILLMError) return err;
  if (err instanceof APIConnectionError) {
    return new OpenAILLMError('connection_lost', `could not reach the LLM server: ${err.message}`, undefined, { cause: err });
  }
  if (err instanceof APIError) {
    if (err.status === undefined) {
      return new OpenAILLMError('provider_error', `the LLM server reported an error mid-stream: ${err.message}`, undefined, { cause: err });
    }
    return new OpenAILLMError(codeForHttpStatus(err.status), `LLM request failed (${err.status}): ${err.message}`, err.status, { cause: err });
  }
  const message = err instanceof Error ? err.message : String(err);
  if (err instanceof SyntaxError) {
    return new OpenAILLMError('invalid_response', `the LLM server sent a chunk that is not JSON: ${message}`, undefined, { cause: err });
  }
  return new OpenAILLMError('connection_lost', `the LLM response stream broke: ${message}`, undefined, { cause: err });
}
