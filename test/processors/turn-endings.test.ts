import test from 'ava';
import { isBackchannel, textCue } from '../../processors/turns/turn-endings.ts';

test('terminal punctuation closes a turn; a trailing comma, dash or ellipsis opens it', (t) => {
  t.is(textCue('What is your name?', 'en'), 'closed');
  t.is(textCue('Tell me a joke.', 'en'), 'closed');
  t.is(textCue('Wow!', 'en'), 'closed');
  t.is(textCue('My name is,', 'en'), 'open');
  t.is(textCue('What can you…', 'en'), 'open');
  t.is(textCue('Well -', 'en'), 'open');
});

test('without punctuation, an open-ending word opens the turn and other words say nothing', (t) => {
  t.is(textCue('I would like a table for', 'en'), 'open');
  t.is(textCue('tell me about', 'en'), 'open');
  t.is(textCue('and then um', 'en'), 'open');
  t.is(textCue('thank you', 'en'), 'none');
  t.is(textCue('[unrecognised speech]', 'en'), 'none');
  t.is(textCue('', 'en'), 'none');
});

test('a period after a conjunction, preposition, article or filler is a recogniser closing its segment: open', (t) => {
  // stt:moonshine writes these for open phrases said with a pause after them.
  t.is(textCue('I would like to book a table for.', 'en'), 'open');
  t.is(textCue('Could you tell me about the.', 'en'), 'open');
  t.is(textCue('I was thinking that, um.', 'en'), 'open');
  t.is(textCue('Coffee and.', 'en'), 'open');
  // A question mark still closes: the words asked something.
  t.is(textCue('What is it for?', 'en'), 'closed');
});

test('a period after an auxiliary or pronoun says nothing either way (the prosody decides); bare, they open', (t) => {
  t.is(textCue('My name is.', 'en'), 'none');
  t.is(textCue('Yes, I can.', 'en'), 'none');
  t.is(textCue('My name is', 'en'), 'open');
  t.is(textCue('Yes I can', 'en'), 'open');
});

test('languages without the period list keep the period as closing', (t) => {
  t.is(textCue('Je voudrais une table pour deux et.', 'fr'), 'closed');
  t.is(textCue('Je voudrais une table pour deux et', 'fr'), 'open');
});

test('backchannels are recognised by their words, whatever the punctuation', (t) => {
  t.true(isBackchannel('Yeah.', 'en'));
  t.true(isBackchannel('Mm-hm, right.', 'en'));
  t.false(isBackchannel('Wait.', 'en'));
  t.false(isBackchannel('[unrecognised speech]', 'en'));
});

test('a recogniser that closes every segment (closingPunctuation false): its period says nothing, its question mark still closes', (t) => {
  const segments = { closingPunctuation: false };
  t.is(textCue('He was not.', 'en', segments), 'none');
  t.is(textCue('Thank you!', 'en', segments), 'none');
  t.is(textCue('I would like a table for.', 'en', segments), 'open');
  t.is(textCue('My name is.', 'en', segments), 'open');
  t.is(textCue('Who are you?', 'en', segments), 'closed');
  t.is(textCue('What can you...', 'en', segments), 'open');
  t.is(textCue('Well,', 'en', segments), 'open');
  // The default reads the period.
  t.is(textCue('He was not.', 'en'), 'closed');
});
