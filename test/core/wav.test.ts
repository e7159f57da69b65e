/** encodeWav (core/audio.ts): a mono 16-bit PCM WAV whose header and samples read back as written. */
import test from 'ava';
import { Buffer } from 'node:buffer';
import { encodeWav } from '../../core/audio.ts';

test('the header describes mono 16-bit PCM at the rate given, and the samples follow little-endian', (t) => {
  const pcm = Int16Array.from([0, 1, -1, 32767, -32768, 1234]);
  const wav = Buffer.from(encodeWav(pcm, 24_000));
  t.is(wav.length, 44 + 12);
  t.is(wav.toString('ascii', 0, 4), 'RIFF');
  t.is(wav.readUInt32LE(4), 36 + 12);
  t.is(wav.toString('ascii', 8, 16), 'WAVEfmt ');
  t.is(wav.readUInt32LE(16), 16);
  t.is(wav.readUInt16LE(20), 1, 'PCM');
  t.is(wav.readUInt16LE(22), 1, 'mono');
  t.is(wav.readUInt32LE(24), 24_000);
  t.is(wav.readUInt32LE(28), 48_000, 'byte rate');
  t.is(wav.readUInt16LE(32), 2, 'block align');
  t.is(wav.readUInt16LE(34), 16, 'bits per sample');
  t.is(wav.toString('ascii', 36, 40), 'data');
  t.is(wav.readUInt32LE(40), 12);
  t.deepEqual(Array.from({ length: pcm.length }, (_, i) => wav.readInt16LE(44 + i * 2)), Array.from(pcm));
});

test('a subarray view is encoded from its own samples, not its whole buffer', (t) => {
  const whole = Int16Array.from([9, 9, 5, 6, 9]);
  const wav = Buffer.from(encodeWav(whole.subarray(2, 4), 16_000));
  t.is(wav.readUInt32LE(40), 4);
  t.deepEqual([wav.readInt16LE(44), wav.readInt16LE(46)], [5, 6]);
});
