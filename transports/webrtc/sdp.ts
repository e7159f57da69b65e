/**
 * Session descriptions, touched only where latency asks for it.
 *
 * Opus in libwebrtc sends 20 ms packets unless the description the sender applied asks for less
 * (`a=ptime`, and `minptime` in the Opus fmtp line). A 20 ms packet cannot leave before its
 * 20 ms are captured, and the receiver's jitter buffer keeps at least a packet's worth: each
 * audio hop of a conversation pays both. `preferShortAudioPackets` asks for 10 ms packets (the
 * smallest that libwebrtc's Opus encoder makes with its default settings), at the cost of about
 * 8 kbit/s more in packet headers per direction. Measured by `npm run bench -- audio-hop`.
 *
 * The offerer (our rooms) puts it in its offer, so the visitor's browser sends 10 ms packets; it
 * puts it in the visitor's answer before applying it, so our own encoder does the same. A
 * browser that ignores it still works: the attribute is a preference, never a requirement.
 */

export const SDP_DEFAULTS = {
  /** Opus packet duration asked for, ms. */
  audioPtimeMs: 10,
} as const;

/**
 * Returns `sdp` with every Opus audio section asking for `ptimeMs` packets: `a=ptime` set (added
 * or replaced) and `minptime` in the Opus fmtp line lowered to it. Sections without Opus, and
 * descriptions without audio, come back unchanged. Line endings are kept (CRLF in SDP).
 */
export function preferShortAudioPackets(sdp: string, ptimeMs: number = SDP_DEFAULTS.audioPtimeMs): string {
  if (!Number.isInteger(ptimeMs) || ptimeMs < 3 || ptimeMs > 120) throw new RangeError(`ptime must be an integer of 3..120 ms, got ${ptimeMs}`);
  const eol = sdp.includes('\r\n') ? '\r\n' : '\n';
  const lines = sdp.split(/\r?\n/);
  const trailing = lines.at(-1) === '' ? lines.pop() : undefined;
  // Split into the session part and one block per m= section.
  const blocks: string[][] = [[]];
  for (const line of lines) {
    if (line.startsWith('m=')) blocks.push([]);
    blocks.at(-1)!.push(line);
  }
  const out: string[] = [...blocks[0]!];
  for (const block of blocks.slice(1)) {
    const isAudio = block[0]!.startsWith('m=audio');
    const opus = isAudio ? block.map((l) => /^a=rtpmap:(\d+) opus\//i.exec(l)?.[1]).find((pt) => pt !== undefined) : undefined;
    if (opus === undefined) {
      out.push(...block);
      continue;
    }
    const edited = block
      .filter((l) => !l.startsWith('a=ptime:'))
      .map((l) => {
        if (!l.startsWith(`a=fmtp:${opus} `)) return l;
        const params = l.slice(`a=fmtp:${opus} `.length).split(';').filter((p) => p.trim() !== '' && !/^\s*minptime=/i.test(p));
        return `a=fmtp:${opus} ${[`minptime=${ptimeMs}`, ...params.map((p) => p.trim())].join(';')}`;
      });
    // a=ptime belongs with the media attributes; after the rtpmap/fmtp lines is as good as any.
    const at = edited.findLastIndex((l) => l.startsWith('a=rtpmap:') || l.startsWith('a=fmtp:'));
    edited.splice(at + 1, 0, `a=ptime:${ptimeMs}`);
    out.push(...edited);
  }
  if (trailing !== undefined) out.push(trailing);
  return out.join(eol);
}
