/**
 * The contract suites can fail: services that break one rule each are caught, with a message
 * naming the rule. (Every shipped plugin passing them is test/contracts/.)
 */
import test from 'ava';
import { Observable } from 'rxjs';
import type { LLMEvent, LLMRequest, LLMService, STTService, STTStream, TTSEvent, TTSRequest, TTSService } from '../../processors/index.ts';
import { ContractViolation, llmContract, runContract, sttContract, ttsContract } from '../../testing/index.ts';

const tone = (ms: number, rate: number) => Int16Array.from({ length: Math.round((ms * rate) / 1000) }, (_, i) => Math.round(8000 * Math.sin((2 * Math.PI * 220 * i) / rate)));

/** Speaks at 16 kHz whatever rate was asked. */
class FixedRateTTS implements TTSService {
  readonly name = 'fixed-rate';
  async *synthesize(request: TTSRequest): AsyncIterable<TTSEvent> {
    for (const _ of request.text.split(' ')) yield { type: 'audio', pcm: tone(300, 16_000), sampleRate: 16_000 };
  }
}

/** Ends without a done event, and turns an abort into a generic failure. */
class SloppyLLM implements LLMService {
  readonly name = 'sloppy';
  async *stream(request: LLMRequest): AsyncIterable<LLMEvent> {
    for (const word of ['Hello ', 'there.']) {
      if (request.signal?.aborted) throw new Error('something went wrong');
      yield { type: 'text', text: word };
      await new Promise((r) => setTimeout(r, 5));
    }
  }
}

/** Accepts any key, and its transcripts never complete on close. */
class LeakySTT implements STTService {
  readonly name = 'leaky';
  async connect(): Promise<STTStream> {
    return {
      sendAudio: () => {},
      finalize: () => {},
      transcripts: new Observable(() => {}),
      close: async () => {},
    };
  }
}

/** A refused key reported as a plain Error instead of a ProviderError. */
class PlainErrorTTS extends FixedRateTTS {
  override async *synthesize(): AsyncIterable<TTSEvent> {
    throw new Error('401 Unauthorized');
  }
}

async function failures(checks: ReturnType<typeof ttsContract>) {
  return (await runContract(checks)).filter((r) => !r.passed).map((r) => ({ name: r.name, message: r.error!.message, violation: r.error instanceof ContractViolation }));
}

test('a TTS that ignores the requested sample rate fails the audio check, naming the rates', async (t) => {
  const failed = await failures(ttsContract({ create: () => new FixedRateTTS(), timeoutMs: 5000 }));
  const audio = failed.find((f) => f.name.startsWith('tts: audible'));
  t.truthy(audio);
  t.regex(audio!.message, /asked for 24000 Hz, got 16000 Hz/);
  t.true(audio!.violation);
});

test('a refused key that is not a ProviderError auth_failed fails the refusal check', async (t) => {
  const failed = await failures(ttsContract({ create: () => new FixedRateTTS(), refused: () => new PlainErrorTTS(), sampleRates: [16_000], timeoutMs: 5000 }));
  const refusal = failed.find((f) => f.name.includes('refused key'));
  t.truthy(refusal);
  t.regex(refusal!.message, /must fail with a ProviderError/);
});

test('an LLM without a done event, and with aborts surfacing as failures, fails those three checks', async (t) => {
  const failed = await failures(llmContract({ create: () => new SloppyLLM(), timeoutMs: 5000 }));
  t.deepEqual(failed.map((f) => f.name).sort(), [
    'llm: an abort mid-stream stops the stream with an abort, not a provider error',
    'llm: an already aborted request yields no text',
    'llm: streams text, then one done event, last',
  ]);
  t.regex(failed.find((f) => f.name.startsWith('llm: streams'))!.message, /0 done events/);
  t.regex(failed.find((f) => f.name.startsWith('llm: an abort'))!.message, /an abort surfaced as Error: something went wrong/);
});

test('an STT that never transcribes nor completes fails by timing out, naming what it waited for', async (t) => {
  const failed = await failures(sttContract({ create: () => new LeakySTT(), speech: tone(500, 16_000), sampleRate: 16_000, expectedText: 'hello', timeoutMs: 300 }));
  t.is(failed.length, 3);
  t.true(failed.every((f) => f.violation));
  t.truthy(failed.find((f) => /a final transcript matching hello did not happen within 300 ms/.test(f.message)));
  t.truthy(failed.find((f) => /transcripts to complete after close did not happen within 300 ms/.test(f.message)));
});
