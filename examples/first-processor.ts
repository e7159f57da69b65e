/**
 * Your first processor (docs/first-processor.md): spells out digits in what the language model
 * says, so the TTS reads "3" as "three", and tests itself with the harness of the testing entry
 * point, on the virtual clock. Imports only the package's public entry points.
 *
 *   npx tsx examples/first-processor.ts
 */
import { concat, FrameProcessor, frame, silence, VirtualClock, type Direction, type Frame } from 'svc-avatar/core';
import { createVoicePipeline } from 'svc-avatar/agent';
import { MemoryMediaSink } from 'svc-avatar/transports';
import { Conversation, EnergyVAD, expectFrameTypes, runProcessorTest, ScriptedLLM, ScriptedSTT, ToneTTS, toneSpeech } from 'svc-avatar/testing';

const DIGITS = ['zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine'];

/** Replaces each digit of the model's text with its English word. Every other frame passes. */
export class SpellDigits extends FrameProcessor {
  protected override process(f: Frame, direction: Direction): void {
    if (f.type === 'llm-text' && direction === 'downstream') {
      this.push(frame('llm-text', { text: f.text.replace(/\d/g, (d) => DIGITS[Number(d)]!) }), direction);
      return;
    }
    // Anything else, in either direction, goes on untouched: a processor never swallows what it does not own.
    this.push(f, direction);
  }
}

const result = await runProcessorTest(new SpellDigits(), [
  frame('llm-response-start', { responseId: 'r1' }),
  frame('llm-text', { text: 'You have 3 new messages' }),
  { sleepMs: 100 },
  frame('llm-text', { text: ' and 1 reminder.' }),
  frame('llm-response-end', { responseId: 'r1' }),
  { upstream: frame('error', { message: 'an error going up passes too', fatal: false }) },
]);
expectFrameTypes(result.downstream, ['llm-response-start', 'llm-text', 'llm-text', 'llm-response-end']);
expectFrameTypes(result.upstream, ['error']);
const said = result.downstream.flatMap((f) => (f.type === 'llm-text' ? [f.text] : [])).join('');
if (said !== 'You have three new messages and one reminder.') throw new Error(`unexpected text: ${said}`);
console.log(`SpellDigits: "${said}" (virtual time ${result.clock.now()} ms, outcome ${result.outcome?.how})`);

// The same processor in a whole (scripted) conversation, after the language model.
const clock = new VirtualClock();
const tts = new ToneTTS(clock);
const voice = createVoicePipeline({
  vad: new EnergyVAD(),
  stt: new ScriptedSTT(clock, ['how many messages']),
  llm: new ScriptedLLM(clock, ['You have 3 new messages.']),
  tts,
  sink: new MemoryMediaSink(),
  afterLLM: new SpellDigits(),
});
const c = await Conversation.start({ pipeline: voice.processors, clock });
await c.play([
  { say: concat([toneSpeech(600), silence(800, 16_000)]) }, // speech, then the silence that ends the turn
  { until: () => tts.requests.length > 0, withinMs: 5000, what: 'the answer to be spoken' },
]);
if (tts.requests[0]!.text !== 'You have three new messages.') throw new Error(`the TTS was asked for: ${tts.requests[0]!.text}`);
console.log(`in a conversation, the TTS speaks: "${tts.requests[0]!.text}"`);
await c.cancel();
