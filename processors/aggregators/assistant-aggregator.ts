/**
 * AssistantTurnAggregator: records in the context what the bot actually said. It sits after the
 * output transport and collects `tts-text` (words as they were played); the turn is committed
 * when the bot stops speaking, including when an interruption cut it short, so the model never
 * believes it said words the user did not hear.
 */
import { frame, type Direction, type Frame } from '../../core/frames.ts';
import { FrameProcessor, type ProcessorOptions } from '../../core/processor.ts';
import type { LLMContext } from '../llm/context.ts';

export class AssistantTurnAggregator extends FrameProcessor {
  private words: string[] = [];

  constructor(readonly context: LLMContext, options: ProcessorOptions = {}) {
    super(options);
  }

  protected override process(f: Frame, direction: Direction): void {
    switch (f.type) {
      case 'tts-text':
        this.words.push(f.text);
        break;
      case 'bot-stopped-speaking':
      case 'interruption':
      case 'end':
      case 'cancel':
        if (direction === 'downstream') this.commit();
        break;
      default:
        break;
    }
    this.push(f, direction);
  }

  private commit(): void {
    const text = this.words.join(' ').replace(/\s+/g, ' ').trim();
    this.words = [];
    if (!text) return;
    this.context.addAssistant(text);
    // Upstream: this aggregator sits after the output, which is the way to the client.
    this.push(frame('client-message', { message: { type: 'transcript-turn', owner: 'bot', text } }), 'upstream');
  }
}
