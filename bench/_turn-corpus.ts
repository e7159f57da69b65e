/** The turn corpus, shared by `bench -- turns` and `bench -- moonshine-stt`. */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { rms } from '../core/audio.ts';

export const VOICES = [
  ['en-us', 175],
  ['en', 150],
  ['en-gb-scotland', 200],
  ['en-029', 170],
] as const;
/** Complete utterances: the offline STT's phrases. */
export const COMPLETE = ['What is your name?', 'How are you?', 'Tell me a joke', 'Thank you', 'Who are you?', 'What can you do?', 'Hello'];
/** Open utterances: a first half, a pause, the rest. */
export const OPEN: Array<[string, string]> = [
  ['I would like to book a table for,', 'two people tonight.'],
  ['My name is,', 'Alex.'],
  ['Could you tell me about the,', 'weather tomorrow?'],
];
export const BACKCHANNELS = ['uh-huh', 'mm-hm', 'yeah', 'right', 'okay'];

/** Debian's pocketsphinx-testdata: human read speech (16 kHz mono WAV), installed by the pretest. */
export const HUMAN = '/usr/share/pocketsphinx/test/data/librivox';
export const HUMAN_IDS = ['0870', '0880', '0890', '0920', '0930'];

/** A librivox sentence's samples (16 kHz). */
export function humanSentence(id: string): Int16Array {
  const b = readFileSync(join(HUMAN, `sense_and_sensibility_01_austen_64kb-${id}.wav`));
  return new Int16Array(b.buffer.slice(b.byteOffset + 44, b.byteOffset + b.length));
}

/** The librivox sentences split at their quietest 30 ms between 35 % and 65 % of their length (none without the package). */
export function humanOpen(): Array<[Int16Array, Int16Array]> {
  if (!existsSync(HUMAN)) return [];
  return HUMAN_IDS.map((id) => {
    const pcm = humanSentence(id);
    const frame = 160;
    let cut = 0;
    let quietest = Infinity;
    for (let i = Math.floor((pcm.length * 0.35) / frame); i < (pcm.length * 0.65) / frame; i++) {
      const e = rms(pcm.subarray(i * frame, (i + 3) * frame));
      if (e < quietest) [quietest, cut] = [e, (i + 1) * frame];
    }
    return [pcm.slice(0, cut), pcm.slice(cut)];
  });
}
