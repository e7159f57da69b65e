/**
 * Main-thread client of the Moonshine worker thread (moonshine-worker.mjs): loads the model once
 * per process (`sharedMoonshineEngine`), sends it 16 kHz audio and gets the text back. Requests
 * are served one at a time in arrival order. The worker does not keep the process alive while
 * nothing is asked of it; `close()` ends it.
 *
 * The model is Moonshine "tiny" (English, MIT licence, 27 M parameters; encoder 7.9 MB and decoder
 * 20 MB, quantised), the copy that the npm package `@usefulsensors/moonshine-js` 0.1.5 ships: no
 * download at run time.
 */
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { resolveOptions } from '../../../core/options.ts';
import { EngineWorker } from '../engine-worker.ts';
import { LocalEngineError } from '../local-engine-error.ts';

/** The rate the model takes. */
export const MOONSHINE_SAMPLE_RATE = 16_000;

/** Shapes of the two models the package ships (decoder layers, attention heads, head size). */
const MODELS = {
  tiny: { layers: 6, heads: 8, headDim: 36 },
  base: { layers: 8, heads: 8, headDim: 52 },
} as const;

export type MoonshineModelName = keyof typeof MODELS;

export const MOONSHINE_ENGINE_DEFAULTS = {
  /** `tiny` (27 M parameters) or `base` (61 M: more accurate, about 2.5x the time). */
  model: 'tiny' as MoonshineModelName,
  /** Threads onnxruntime may use for one recognition (one leaves the other core to the sessions). */
  threads: 1,
} as const;

export interface MoonshineEngineOptions {
  readonly model?: MoonshineModelName;
  readonly threads?: number;
}

export interface MoonshineResult {
  readonly text: string;
  /** Tokens decoded (before the end token). */
  readonly tokens: number;
  /** Geometric mean of the decoded tokens' probabilities (0-1). */
  readonly confidence: number;
  /** Time the worker spent on it. */
  readonly ms: number;
}

type Reply =
  | { type: 'text'; id: number; text: string; tokens: number; confidence: number; ms: number }
  | { type: 'error'; id: number; message: string };

/** Tokens the tokenizer (llama-tokenizer-js) knows; the model's last ids are unused padding. */
const VOCABULARY = 32_000;

/**
 * The shortest audio the encoder takes (56 ms): its three convolutions (kernel 127 stride 64,
 * kernel 7 stride 3, kernel 3 stride 2) need 127 + 12 * 64 samples; shorter audio is an
 * onnxruntime error there, and holds no word anyway.
 */
export const MOONSHINE_MIN_SAMPLES = 895;

function modelDirectory(model: MoonshineModelName): string {
  const entry = fileURLToPath(import.meta.resolve('@usefulsensors/moonshine-js'));
  return join(dirname(entry), 'model', model, 'quantized');
}

export class MoonshineEngine {
  readonly settings: { readonly model: MoonshineModelName; readonly threads: number };
  private readonly worker: EngineWorker<Reply>;
  private readonly pending = new Map<number, { resolve: (r: MoonshineResult) => void; reject: (e: Error) => void }>();
  private nextId = 1;

  constructor(options: MoonshineEngineOptions = {}) {
    this.settings = resolveOptions(MOONSHINE_ENGINE_DEFAULTS, options);
    if (!(this.settings.model in MODELS)) throw new LocalEngineError('invalid_options', `model must be one of ${Object.keys(MODELS).join(', ')}, got ${JSON.stringify(this.settings.model)}`);
    if (!Number.isInteger(this.settings.threads) || this.settings.threads < 1 || this.settings.threads > 16) {
      throw new LocalEngineError('invalid_options', `threads must be an integer within 1-16, got ${this.settings.threads}`);
    }
    const { model, threads } = this.settings;
    this.worker = new EngineWorker<Reply>({
      name: 'moonshine',
      url: new URL('./moonshine-worker.mjs', import.meta.url),
      workerData: () => {
        const directory = modelDirectory(model);
        return {
          encoderPath: join(directory, 'encoder_model.onnx'),
          decoderPath: join(directory, 'decoder_model_merged.onnx'),
          threads,
          vocabulary: VOCABULARY,
          ...MODELS[model],
        };
      },
      onReply: (reply) => {
        const request = this.pending.get(reply.id);
        if (!request) return;
        this.pending.delete(reply.id);
        this.worker.letGo();
        if (reply.type === 'text') request.resolve({ text: reply.text, tokens: reply.tokens, confidence: reply.confidence, ms: reply.ms });
        else request.reject(new LocalEngineError('engine_failure', `moonshine: ${reply.message}`));
      },
      onStop: (error) => {
        const requests = [...this.pending.values()];
        this.pending.clear();
        for (const request of requests) request.reject(error);
      },
      busy: () => this.pending.size > 0,
    });
  }

  /** Starts the worker and loads the model (0.3-2 s, once); `transcribe` calls it anyway. */
  start(): Promise<void> {
    return this.worker.start();
  }

  /**
   * The text of `audio` (16 kHz, -1..1). `maxTokens` bounds the decoding (a model that loops on
   * noise stops there).
   */
  async transcribe(audio: Float32Array, maxTokens: number): Promise<MoonshineResult> {
    // Too short for the encoder, or a buffer already handed to the worker (detached: length 0,
    // and a message carrying it never arrives).
    if (audio.length < MOONSHINE_MIN_SAMPLES) return { text: '', tokens: 0, confidence: 0, ms: 0 };
    // Held before the worker is waited for: a close from now on fails it.
    const id = this.nextId++;
    return new Promise<MoonshineResult>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.post({ type: 'transcribe', id, audio, maxTokens }, [audio.buffer as ArrayBuffer]).catch((err: unknown) => {
        this.pending.delete(id);
        reject(err as Error);
      });
    });
  }

  close(): Promise<void> {
    return this.worker.close();
  }
}

const shared = new Map<string, MoonshineEngine>();

/** The process-wide engine for a model (the model is loaded once and serves every session). */
export function sharedMoonshineEngine(options: MoonshineEngineOptions = {}): MoonshineEngine {
  const engine = new MoonshineEngine(options);
  const key = `${engine.settings.model}/${engine.settings.threads}`;
  const existing = shared.get(key);
  if (existing) return existing;
  shared.set(key, engine);
  return engine;
}
