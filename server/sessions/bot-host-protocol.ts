/**
 * The messages between a server process and its bot host (server/sessions/bot-host.ts and
 * bot-host-process.ts), over Node's IPC channel with `serialization: 'advanced'` (structured
 * clone: Buffers, typed arrays and Dates cross as they are). Requests carry an `id` and get one
 * `reply`; the host also reports on its own (`ended`, `load`). Both sides are this codebase, of
 * one version: nothing here is a public protocol.
 */
import type { ProviderChoice } from '../../agent/agent-pipeline.ts';
import type { SessionOutcome, SessionStart, TerminationReason } from '../../agent/session-contract.ts';
import type { BotRunnerTuning, SessionTimeouts } from '../../agent/bot-session.ts';
import type { CreatedRoom } from '../../transports/webrtc/room-registry.ts';
import type { ResolvedSessionFace } from './agent-face.ts';

/** What the host is started with (its first message). */
import type { RtcNetworkSettings } from '../../transports/webrtc/rtc-network.ts';

export interface BotHostInit {
  readonly logLevel: string;
  /** The host's scheduling priority (os.setPriority), set before it loads anything. */
  readonly nice: number;
  readonly providers: ProviderChoice;
  readonly webhookAllowedRanges: readonly string[];
  /** The server's `iceAllowedRanges`: the host's rooms screen visitors' candidates alike. */
  readonly iceAllowedRanges: readonly string[];
  /** The server's `rtc` settings (TURN, announced address, port range, policy): the host's peers cross NATs alike. */
  readonly rtc: RtcNetworkSettings;
  readonly timeouts?: Partial<SessionTimeouts>;
  /** The runner's engine knobs that are plain data (tests shorten the VAD's stop delay). */
  readonly tuning?: BotHostTuning;
  /** How often the host reports its load (frame lateness, CPU). */
  readonly loadReportMs: number;
}

export type BotHostTuning = Pick<BotRunnerTuning, 'vadOptions' | 'sttOptions' | 'ttsOptions' | 'outputOptions'>;

export type HostRequest =
  | { readonly t: 'create-room'; readonly id: number; readonly name: string; readonly tokenTtlMs?: number; readonly mediaTtlMs?: number }
  | { readonly t: 'close-room'; readonly id: number; readonly room: string }
  | { readonly t: 'start'; readonly id: number; readonly session: SessionStart; readonly face: ResolvedSessionFace }
  | { readonly t: 'stop'; readonly id: number; readonly sessionId: string; readonly reason: TerminationReason };

export type ToHost =
  | { readonly t: 'init'; readonly init: BotHostInit }
  | HostRequest
  /** A visitor's signalling upgrade, handed over with its socket. */
  | { readonly t: 'upgrade'; readonly url: string; readonly method: string; readonly headers: Record<string, string | string[] | undefined>; readonly head: Uint8Array }
  /** Ends every session for `reason`, then exits. */
  | { readonly t: 'shutdown'; readonly reason: TerminationReason };

export type HostReplyValue = CreatedRoom | boolean | SessionOutcome | null;

export type FromHost =
  | { readonly t: 'ready' }
  | { readonly t: 'reply'; readonly id: number; readonly ok: true; readonly value: HostReplyValue }
  /** `code`: a provider that could not start (`ProviderStartError`), recorded as the call's failure_reason. */
  | { readonly t: 'reply'; readonly id: number; readonly ok: false; readonly error: string; readonly code?: string }
  | { readonly t: 'ended'; readonly sessionId: string; readonly outcome: SessionOutcome }
  /**
   * Face frames' lateness (ms) since the last report, the host's CPU time so far, and each live
   * session's peak visitor count (what its call records if the host dies).
   */
  | { readonly t: 'load'; readonly lateness: readonly number[]; readonly cpu: NodeJS.CpuUsage; readonly peaks: Readonly<Record<string, number>> };
