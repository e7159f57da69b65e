/**
 * A synthetic test phrase: voiced syllables (a 120-180 Hz glottal pulse train through two
 * formant resonators) separated by short pauses, with a known amplitude envelope.
 */
export function syntheticPhrase(syllables = 10, sampleRate = 16_000): Int16Array {
  const out: number[] = [];
  let phase = 0;
  for (let s = 0; s < syllables; s++) {
    const len = Math.round(sampleRate * (0.16 + 0.08 * (s % 3)));
    const pause = Math.round(sampleRate * (0.08 + 0.06 * (s % 2)));
    const f0 = 120 + 60 * Math.sin(s);
    const gain = 0.25 + 0.2 * ((s * 7) % 5) / 4;
    let y1 = 0, y2 = 0, z1 = 0, z2 = 0;
    const res = (f: number, bw: number) => {
      const r = Math.exp(-Math.PI * bw / sampleRate);
      return [2 * r * Math.cos(2 * Math.PI * f / sampleRate), -r * r] as const;
    };
    const [a1, a2] = res(700, 110), [b1, b2] = res(1200 + 300 * (s % 2), 130);
    for (let i = 0; i < len; i++) {
      phase += f0 / sampleRate;
      const pulse = phase >= 1 ? ((phase -= 1), 1) : 0;
      const y = pulse + a1 * y1 + a2 * y2; y2 = y1; y1 = y;
      const z = y + b1 * z1 + b2 * z2; z2 = z1; z1 = z;
      const env = Math.sin(Math.PI * i / len) ** 0.7;
      out.push(z * env * gain * 0.05);
    }
    for (let i = 0; i < pause; i++) out.push(0);
  }
  const pcm = new Int16Array(out.length);
  const peak = out.reduce((m, v) => Math.max(m, Math.abs(v)), 0) || 1;
  for (let i = 0; i < out.length; i++) pcm[i] = Math.round((out[i]! / peak) * 20000);
  return pcm;
}

export function pearson(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  let ma = 0, mb = 0;
  for (let i = 0; i < n; i++) { ma += a[i]!; mb += b[i]!; }
  ma /= n; mb /= n;
  let sab = 0, saa = 0, sbb = 0;
  for (let i = 0; i < n; i++) { const da = a[i]! - ma, db = b[i]! - mb; sab += da * db; saa += da * da; sbb += db * db; }
  return sab / Math.sqrt(saa * sbb || 1);
}

export function rmsEnvelope(audio: Int16Array): number {
  let s = 0;
  for (let i = 0; i < audio.length; i++) s += audio[i]! * audio[i]!;
  return Math.sqrt(s / audio.length);
}
