/**
 * Letters -> sounds for character-timed TTS (processors/tts/letter-sounds.ts): the visible
 * classes the face needs (closures, labiodentals, rounding, spread) from English spelling, with
 * each sound timed by the letters that spell it.
 */
import test from 'ava';
import { LetterSounds, spellSounds, wordSounds, type TimedCharacter } from '../../processors/tts/letter-sounds.ts';

const sounds = (word: string) => spellSounds(word).flatMap((s) => s.sounds).join(' ');
const timed = (text: string, msPerChar = 50, from = 0): TimedCharacter[] => [...text].map((char, i) => ({ char, startMs: from + i * msPerChar, endMs: from + (i + 1) * msPerChar }));

test('spellings that show on the lips: closures, tucks, rounding, spread', (t) => {
  t.is(sounds('map'), 'm æ p');
  t.is(sounds('bob'), 'b ɒ b');
  t.is(sounds('phone'), 'f oʊ n', 'ph is an f; the final e is silent and makes the o long');
  t.is(sounds('five'), 'f a ɪ v');
  t.is(sounds('moon'), 'm u n');
  t.is(sounds('boat'), 'b oʊ t');
  t.is(sounds('window'), 'w ɪ n d oʊ');
  t.is(sounds('see'), 's i');
  t.is(sounds('each'), 'i t ʃ');
  t.is(sounds('beautiful'), 'b j u t ɪ f ʌ l');
});

test('silent letters make no sound: climb, knight, write, laugh; doubled consonants are one', (t) => {
  t.is(sounds('climb'), 'k l ɪ m');
  t.is(sounds('knight'), 'n a ɪ t');
  t.is(sounds('write'), 'ɹ a ɪ t');
  t.is(sounds('laugh'), 'l ɔ');
  t.is(sounds('summer'), 's ʌ m ɝ');
});

test('common words whose spelling lies come from the word list', (t) => {
  t.is(sounds('of'), 'ʌ v');
  t.is(sounds('one'), 'w ʌ n');
  t.is(sounds('you'), 'j u');
  t.is(sounds('move'), 'm u v');
});

test('each sound takes the time of its letters; a silent letter\'s time goes to the sound before it', (t) => {
  const phone = wordSounds(timed('phone', 40, 100));
  t.deepEqual(phone.map((p) => [p.phoneme, p.startMs, p.endMs]), [['f', 100, 180], ['oʊ', 180, 220], ['n', 220, 300]]);
  // Case and accents fold; an apostrophe keeps no sound of its own.
  t.deepEqual(wordSounds(timed("Bob's")).map((p) => p.phoneme), ['b', 'ɒ', 'b', 's']);
  t.deepEqual(wordSounds(timed('42')), [], 'no letters, no sounds (ElevenLabs normalises numbers to words)');
  // A listed word's sounds share its span, vowels twice a consonant's share.
  const of = wordSounds(timed('of', 60));
  t.deepEqual(of.map((p) => [p.phoneme, Math.round(p.startMs), Math.round(p.endMs)]), [['ʌ', 0, 80], ['v', 80, 120]]);
});

test('streaming: a word split across chunks is converted once complete; pendingStartMs marks the unfinished word', (t) => {
  const stream = new LetterSounds();
  const all = timed('we move bob', 30);
  t.deepEqual(stream.push(all.slice(0, 5)).map((p) => p.phoneme), ['w', 'i'], '"we" closed by its space; "mo" pending');
  t.is(stream.pendingStartMs, 90);
  t.deepEqual(stream.push(all.slice(5, 9)).map((p) => p.phoneme), ['m', 'u', 'v']);
  t.is(stream.pendingStartMs, 240);
  t.deepEqual(stream.push(all.slice(9)), [], 'the last word has no character after it');
  t.deepEqual(stream.flush().map((p) => p.phoneme), ['b', 'ɒ', 'b']);
  t.is(stream.pendingStartMs, undefined);
  t.deepEqual(stream.flush(), []);
});
