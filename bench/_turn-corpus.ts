/** The espeak part of the turn corpus, shared by `bench -- turns` and `bench -- moonshine-stt`. */
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
