/**
 * The built-in turn analyzer: words first, prosody when the words say nothing.
 *
 * | words (turn-endings.ts) | prosody (prosody.ts) | decision |
 * | --- | --- | --- |
 * | closed (`?`, `!`; `.` after a word a sentence can end on) | any | complete |
 * | open (trailing "and", "the", "um", a comma...; "for the." too) | any | incomplete |
 * | none or no words | fall (pitch fell, or the voice faded) | complete |
 * | none or no words | held or rising | incomplete |
 * | none or no words | cannot tell | unsure |
 *
 * With an STT that punctuates (cloud providers) the words decide most pauses; the offline
 * stand-in gives no interim words and its finals come after the pause, so offline the prosody
 * decides first and the final's punctuation, when it comes, can still end the turn at once.
 * A question with a rising end and no transcript is read as "going on": it waits the
 * incomplete bound unless words come (the cost of reading pitch alone, measured in the bench).
 */
import type { TurnAnalyzer, TurnSignals, TurnVerdict } from '../services.ts';
import { ProsodyReader, type ProsodyOptions } from './prosody.ts';
import { textCue } from './turn-endings.ts';

export interface RuleTurnAnalyzerOptions {
  readonly prosody?: ProsodyOptions;
  /** Read the prosody (default true); off, a pause without telling words is `unsure`. */
  readonly useProsody?: boolean;
}

export class RuleTurnAnalyzer implements TurnAnalyzer {
  readonly name = 'rules';
  private readonly prosody: ProsodyReader;
  private readonly useProsody: boolean;

  constructor(options: RuleTurnAnalyzerOptions = {}) {
    this.prosody = new ProsodyReader(options.prosody);
    this.useProsody = options.useProsody ?? true;
  }

  analyze(signals: TurnSignals): TurnVerdict {
    const words = textCue(signals.transcript, signals.language, { closingPunctuation: signals.closingPunctuation ?? true });
    if (words === 'closed') return { decision: 'complete', reason: 'text:closed' };
    if (words === 'open') return { decision: 'incomplete', reason: 'text:open' };
    if (!this.useProsody) return { decision: 'unsure', reason: 'text:none' };
    const reading = this.prosody.read(signals.audio, signals.sampleRate);
    switch (reading.cue) {
      case 'fall':
        return { decision: 'complete', reason: 'prosody:fall' };
      case 'rise':
      case 'held':
        return { decision: 'incomplete', reason: `prosody:${reading.cue}` };
      case 'none':
        return { decision: 'unsure', reason: 'prosody:none' };
    }
  }
}
