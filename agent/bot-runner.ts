/**
 * BotRunner: runs the bot of each admitted session in its room (the `SessionRunner` of
 * agent/session-contract.ts). For one session it:
 *
 * 1. opens the bot's side of the session's room (`openBotRoom`, agent/bot-room.ts: an embedded
 *    room of this process, or a LiveKit room joined with one rtc-node connection), builds the
 *    agent's pipeline (`buildSessionPipeline`), opens the face session and publishes it into the
 *    room (the visitor sees the idle face as soon as they connect), and puts the room's input
 *    transport (the visitor's microphone) at the head of the pipeline;
 * 2. starts the conversation (the pipeline, hence the greeting) once the client has said
 *    `client-ready` and its peer connection is connected, so the first words are not cut
 *    (capped by `subscribeWaitMs`; `clientReadyWaitMs` for clients that never say it);
 * 3. keeps the session alive while a visitor is there: the join deadline, the departure grace
 *    (a visitor who comes back in time continues the same conversation);
 * 4. sends the session messages (agent/session-messages.ts) and reads the client's;
 * 5. ends on the first of: `hang-up`, departure, join deadline, the duration limits and
 *    `end_call` (farewell spoken by the pipeline), a fatal pipeline error, the avatar stopping,
 *    or `stop(reason)` from the server. Every ending sends `session-ended`, stops the worker,
 *    closes the face session, unpublishes, leaves the room (LiveKit: the bot's connection), and
 *    leaves no timer or subscription behind; `ended` settles once with the outcome. The room
 *    itself and the database are the server's.
 *
 * Lifecycle, messages and timeouts: docs/session-messages.md.
 */
import {
  type RunningSession,
  type SessionOutcome,
  type SessionRunner,
  type SessionStart,
  type TerminationReason,
} from './session-contract.ts';
import { BotSession, type BotRunnerOptions } from './bot-session.ts';

export {
  BOT_RUNNER_DEFAULTS,
  type BotRunnerOptions,
  type BotRunnerTuning,
  type SessionFaceFactory,
  type SessionTimeouts,
} from './bot-session.ts';

export class BotRunner implements SessionRunner {
  private readonly live = new Set<BotSession>();

  constructor(private readonly options: BotRunnerOptions) {}

  /** Sessions running now. */
  get sessions(): number {
    return this.live.size;
  }

  /** `participantPeak`: the peak number of visitors so far, while the session runs. */
  async start(session: SessionStart): Promise<RunningSession & { readonly participantPeak: number }> {
    const bot = new BotSession(session, this.options);
    await bot.start();
    this.live.add(bot);
    void bot.ended.then(() => this.live.delete(bot));
    return bot;
  }

  /** Stops every running session (server shutdown); resolves when all have ended. */
  async stopAll(reason: TerminationReason = 'server_shutdown'): Promise<SessionOutcome[]> {
    return Promise.all([...this.live].map((s) => s.stop(reason)));
  }
}
