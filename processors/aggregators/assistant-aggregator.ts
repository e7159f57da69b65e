/**
 * AssistantTurnAggregator: records in the context what the bot actually said. It sits after the
 * output transport and collects `tts-text` (words as they were played); the turn is committed
 * when the bot stops speaking at the end of its turn (after `tts-stopped`), when an interruption
 * cuts it short (so the model never believes it said words the user did not hear), or when a new
 * turn starts. A pause in the middle of an answer (the provider was slow and playback ran dry,
 * which also reports bot-stopped-speaking) does not split the answer into two messages.
 */
import { frame, type Direction, type Frame } from '../../core/frames.ts';
import { FrameProcessor, type ProcessorOptions } from '../../core/processor.ts';
import type { LLMContext } from '../llm/context.ts';

export class AssistantTurnAggregator extends FrameProcessor {
  private words: string[] = [];
  /** The TTS said the turn is over; the next bot-stopped-speaking ends it. */
  private turnOver = false;
  private botSpeaking = false;

  constructor(readonly context: LLMContext, options: ProcessorOptions = {}) {
    super(options);
  }

  protected override process(f: Frame, direction: Direction): void {
    switch (f.type) {
      case 'tts-text':
        this.words.push(f.text);
        break;
      case 'tts-stopped':
        // Playback may already have run dry (the response ended late): then the turn is over now.
        if (direction === 'downstream') {
          this.turnOver = true;
          if (!this.botSpeaking) this.commit();
        }
        break;
      case 'bot-started-speaking':
        if (direction === 'downstream') this.botSpeaking = true;
        break;
      case 'bot-stopped-speaking':
        if (direction === 'downstream') {
          this.botSpeaking = false;
          if (this.turnOver) this.commit();
        }
        break;
      case 'tts-started':
      case 'llm-response-start':
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
    this.turnOver = false;
    const text = this.words.join(' ').replace(/\s+/g, ' ').trim();
    this.words = [];
    if (!text) return;
    this.context.addAssistant(text);
    // Upstream: this aggregator sits after the output, which is the way to the client.
    this.push(frame('client-message', { message: { type: 'transcript-turn', owner: 'bot', text } }), 'upstream');
  }
}
