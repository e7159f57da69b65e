/**
 * Which ICE candidates a visitor may hand to the server's libwebrtc (one screen per peer
 * connection, before the answer and after it).
 *
 * Every remote candidate becomes connection checks on libwebrtc's network thread, and that
 * thread's work grows faster than the candidate count: measured on @roamhq/wrtc 0.10, closing a
 * peer connection that had been given 600 loopback candidates took 88 ms, 1,000 took 10.6 s,
 * 1,400 took 62 s and 2,000 took 192 s, and `RTCPeerConnection.close()` blocks the JavaScript
 * thread for all of it (it waits for the network thread); meanwhile that thread serves every other
 * session's media. So the number of candidates is bounded where they enter, not where they end.
 *
 * A candidate is admitted when it parses as RFC 8839 `candidate-attribute`, names an address the
 * address policy allows (ordinary public unicast, plus the ranges the operator opened: the SSRF
 * policy of webhooks and LiveKit urls; a visitor must not make the server send STUN to its
 * loopback or its private network), is not a duplicate of an admitted one (same component,
 * transport, address and port), and fewer than `maxRemoteCandidates` were admitted before.
 * Refused candidates cost nothing: visitors whose own candidates are refused (a browser's
 * mDNS `.local` names, a private LAN address) still connect, because the server learns their
 * address from their connectivity checks (peer-reflexive candidates), as it always did for mDNS.
 */
import { AddressPolicy } from '../../processors/tools/address-policy.ts';
import type { IceCandidateWire } from '../../protocol/room-signalling.ts';

export const REMOTE_CANDIDATE_DEFAULTS = {
  /**
   * Candidates admitted per peer connection. A browser sends one host, one server-reflexive and a
   * few relay candidates per network interface and transport, a dozen on a busy laptop; 32 leaves
   * room for that and keeps a flood far below where libwebrtc's cost bends (closing with 32 takes
   * a few milliseconds).
   */
  maxRemoteCandidates: 32,
} as const;

export type CandidateVerdict =
  | { readonly admitted: true }
  | { readonly admitted: false; readonly reason: 'unparseable' | 'address_refused' | 'duplicate' | 'over_limit'; readonly detail?: string };

export interface RemoteCandidateScreenOptions {
  /** Addresses candidates may name; default `new AddressPolicy()` (public unicast only). */
  readonly policy?: AddressPolicy;
  readonly maxRemoteCandidates?: number;
}

/** `candidate:<foundation> <component> <transport> <priority> <address> <port> typ <type> ...` */
const CANDIDATE = /^(?:a=)?candidate:\S{1,32} (\d{1,3}) (\S{1,16}) \d{1,10} (\S{1,255}) (\d{1,5}) typ (\S{1,16})(?: |$)/i;

const defaultPolicy = new AddressPolicy();

export class RemoteCandidateScreen {
  private readonly seen = new Set<string>();
  private readonly policy: AddressPolicy;
  private readonly max: number;
  /** Candidates refused so far, by reason (diagnostics). */
  readonly refused = { unparseable: 0, address_refused: 0, duplicate: 0, over_limit: 0 };

  constructor(options: RemoteCandidateScreenOptions = {}) {
    this.policy = options.policy ?? defaultPolicy;
    this.max = options.maxRemoteCandidates ?? REMOTE_CANDIDATE_DEFAULTS.maxRemoteCandidates;
  }

  /** How many candidates were admitted (handed, or to be handed, to libwebrtc). */
  get admitted(): number {
    return this.seen.size;
  }

  /** Judges one candidate; an admitted one counts against the limit from now on. */
  admit(candidate: IceCandidateWire): CandidateVerdict {
    const m = CANDIDATE.exec(candidate.candidate);
    if (!m) return this.refuse('unparseable');
    const [, component, transport, address, port] = m;
    const verdict = this.policy.check(address!);
    if (!verdict.allowed) return this.refuse('address_refused', `${verdict.address}: ${verdict.reason}`);
    const key = `${component} ${transport!.toLowerCase()} ${verdict.address} ${Number(port)}`;
    if (this.seen.has(key)) return this.refuse('duplicate');
    if (this.seen.size >= this.max) return this.refuse('over_limit');
    this.seen.add(key);
    return { admitted: true };
  }

  private refuse(reason: keyof RemoteCandidateScreen['refused'], detail?: string): CandidateVerdict {
    this.refused[reason]++;
    return detail === undefined ? { admitted: false, reason } : { admitted: false, reason, detail };
  }
}
