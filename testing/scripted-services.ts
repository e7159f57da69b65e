/**
 * Scripted stand-ins for speech and language providers, at the vendor-neutral service boundary
 * (processors/services.ts), timed on the test's clock (a `VirtualClock` in tests). They play the
 * part of the vendors in tests of pipelines and processors; a vendor plugin itself is tested
 * against a fake of its vendor's wire protocol and the contract suites (testing/contracts/).
 */
import { Subject } from 'rxjs';
import { rms } from '../core/audio.ts';
import type { Clock } from '../core/clock.ts';
import type {
  LLMEvent,
  LLMRequest,
  LLMService,
  STTService,
  STTStream,
  STTStreamOptions,
  TTSEvent,
  TTSRequest,
  TTSService,
  TranscriptEvent,
  VADAnalyzer,
} from '../processors/services.ts';

/** Speech = any 10 ms window louder than the threshold. */
export class EnergyVAD implements VADAnalyzer {
  readonly sampleRate = 16_000;
  readonly windowSamples = 160;
  confidence(window: Int16Array): number {
    return rms(window) > 0.02 ? 1 : 0;
  }
  reset(): void {}
}

/** A tone standing in for speech (VAD-detectable, deterministic). */
export function toneSpeech(ms: number, rate = 16_000): Int16Array {
  const n = Math.round((ms * rate) / 1000);
  const out = new Int16Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.round(8000 * Math.sin((2 * Math.PI * 220 * i) / rate));
  return out;
}

/**
 * STT that "recognises" utterances from a script: each finalize() (end of user speech) yields the
 * next phrase after `latencyMs`. Records the audio it received; can drop its connection.
 */
export class ScriptedSTT implements STTService {
  readonly name = 'scripted-stt';
  readonly connections: Array<{ options: STTStreamOptions; samples: number; closed: boolean }> = [];
  private current: Subject<TranscriptEvent> | undefined;
  failConnects = 0;

  constructor(private readonly clock: Clock, private readonly phrases: string[], private readonly latencyMs = 150) {}

  async connect(options: STTStreamOptions): Promise<STTStream> {
    if (this.failConnects > 0) {
      this.failConnects--;
      throw new Error('connection refused');
    }
    const record = { options, samples: 0, closed: false };
    this.connections.push(record);
    const subject = new Subject<TranscriptEvent>();
    this.current = subject;
    return {
      sendAudio: (pcm) => {
        record.samples += pcm.length;
      },
      finalize: () => {
        const text = this.phrases.shift();
        if (text === undefined) return;
        // Like real providers, the final's end is in the connection's audio time: it covers
        // what was sent up to finalize(), not what arrives while it is being recognised.
        const endMs = (record.samples / options.sampleRate) * 1000;
        this.clock.setTimeout(() => {
          subject.next({ text: text.split(' ')[0]!, final: false });
          subject.next({ text, final: true, language: options.language, endMs });
        }, this.latencyMs);
      },
      transcripts: subject.asObservable(),
      close: async () => {
        record.closed = true;
        subject.complete();
      },
    };
  }

  /** Simulates the provider dropping the live connection. */
  drop(): void {
    this.current?.error(new Error('socket hang up'));
  }
}

export type ScriptedResponse = string | { text?: string; toolCalls?: Array<{ id: string; name: string; arguments: string }> };

/** LLM answering from a script, token by token, after `firstTokenMs`. Records requests and aborts. */
export class ScriptedLLM implements LLMService {
  readonly name = 'scripted-llm';
  readonly model = 'scripted-1';
  readonly requests: LLMRequest[] = [];
  aborted = 0;

  constructor(private readonly clock: Clock, private readonly responses: ScriptedResponse[], private readonly firstTokenMs = 300, private readonly tokenMs = 20) {}

  async *stream(request: LLMRequest): AsyncIterable<LLMEvent> {
    this.requests.push(request);
    const next = this.responses.shift() ?? 'I have nothing more to say.';
    const response = typeof next === 'string' ? { text: next } : next;
    try {
      await this.clock.sleep(this.firstTokenMs, request.signal);
      for (const token of (response.text ?? '').match(/\S+\s*/g) ?? []) {
        yield { type: 'text', text: token };
        await this.clock.sleep(this.tokenMs, request.signal);
      }
      for (const [index, call] of (response.toolCalls ?? []).entries()) {
        // Split like real providers do: id and name first, then the arguments in pieces.
        yield { type: 'tool-call-delta', index, id: call.id, name: call.name };
        for (let i = 0; i < call.arguments.length; i += 4) {
          yield { type: 'tool-call-delta', index, argumentsDelta: call.arguments.slice(i, i + 4) };
        }
      }
      yield { type: 'usage', promptTokens: 10, completionTokens: 5 };
      yield { type: 'done', finishReason: response.toolCalls ? 'tool_calls' : 'stop' };
    } catch (err) {
      if (request.signal?.aborted) this.aborted++;
      throw err;
    }
  }
}

/** TTS producing 60 ms of tone per word, with word timings, after `firstAudioMs`. */
export class ToneTTS implements TTSService {
  readonly name = 'tone-tts';
  readonly requests: TTSRequest[] = [];
  static readonly MS_PER_WORD = 60;

  constructor(private readonly clock: Clock, private readonly firstAudioMs = 100, private readonly withWords = true) {}

  async *synthesize(request: TTSRequest): AsyncIterable<TTSEvent> {
    this.requests.push(request);
    await this.clock.sleep(this.firstAudioMs, request.signal);
    const words = request.text.split(/\s+/).filter(Boolean);
    const ms = ToneTTS.MS_PER_WORD;
    if (this.withWords) yield { type: 'words', words: words.map((word, i) => ({ word, startMs: i * ms, endMs: (i + 1) * ms })) };
    for (let i = 0; i < words.length; i++) yield { type: 'audio', pcm: toneSpeech(ms, request.sampleRate), sampleRate: request.sampleRate };
  }
}
