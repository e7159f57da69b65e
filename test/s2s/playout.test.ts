/**
 * PlayoutLedger: what the user heard of each bot turn, from the speech frames the output wrote.
 */
import test from 'ava';
import { PlayoutLedger } from '../../processors/s2s/playout.ts';

test('a turn plays its queue 40 ms per speech frame, never more than was fed', (t) => {
  const ledger = new PlayoutLedger();
  ledger.fed('a', 100);
  ledger.played(40, true);
  ledger.played(40, false);
  t.is(ledger.playedMs('a'), 80);
  ledger.played(40, false);
  ledger.played(40, false); // underrun: the face plays silence, nothing of the turn
  t.is(ledger.playedMs('a'), 100);
  ledger.fed('a', 60); // more audio after the underrun plays from where the turn was
  ledger.played(40, false);
  t.is(ledger.playedMs('a'), 140);
  t.is(ledger.fedMs('a'), 160);
});

test('a speech-start frame moves to the next turn; a cancel leaves nothing queued to play', (t) => {
  const ledger = new PlayoutLedger();
  ledger.fed('a', 80);
  ledger.fed('b', 80);
  ledger.played(40, true);
  ledger.played(40, false);
  ledger.played(40, true);
  t.is(ledger.playedMs('a'), 80);
  t.is(ledger.playedMs('b'), 40);
  ledger.cancelled();
  ledger.fed('c', 80);
  ledger.played(40, true);
  t.is(ledger.playedMs('b'), 40, 'the cancelled turn does not advance');
  t.is(ledger.playedMs('c'), 40);
});
