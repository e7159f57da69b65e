/**
 * What the offline speech-to-text stand-in transcribes when it heard speech that matches none of
 * its phrases. A marker rather than silence, so the conversation still takes its turn and any
 * language model (the offline responder, or a real one) can say it did not understand.
 */
export const UNRECOGNISED_SPEECH = '[unrecognised speech]';
