/**
 * A runner's HTTP for the API processes (runner-protocol.ts): start a placed session's bot, and
 * look at a release now. On the runner's one port, beside the rooms' signalling the visitors use;
 * every request needs `Authorization: Bearer <SVC_RUNNER_SECRET>` (401 otherwise, logged with the
 * reason and the caller's address, never the secret). Operators may also keep `/internal/` to
 * the API processes' network (docs/deployment.md).
 */
import type { Context, Next } from 'koa';
import type { Logger } from 'pino';
import type { HttpHost } from '../http/http-app.ts';
import { bearerMatches, RUNNER_PATHS } from './runner-protocol.ts';
import { RunnerRefusal, RunnerStartFailure, type RunnerSessions } from './runner-sessions.ts';

const SESSION_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function mountRunnerRoutes(host: Pick<HttpHost, 'rootRouter'>, sessions: RunnerSessions, secret: string, logger: Logger): void {
  const log = logger.child({ component: 'runner-http' });
  const answer = (ctx: Context, status: number, body: Record<string, unknown>) => {
    ctx.status = status;
    ctx.set('Cache-Control', 'no-store');
    ctx.body = body;
  };
  const authorized = async (ctx: Context, next: Next) => {
    const verdict = bearerMatches(ctx.get('authorization') || undefined, secret);
    if (verdict !== 'ok') {
      log.warn({ reason: verdict === 'missing' ? 'no runner secret' : 'wrong runner secret', remote: ctx.socket.remoteAddress, path: ctx.path }, 'runner request refused (401)');
      answer(ctx, 401, { error_code: 'unauthorized', message: 'a runner request needs the runner secret' });
      return;
    }
    if (!SESSION_ID.test(String(ctx.params.session_id))) {
      answer(ctx, 409, { error_code: 'not_placed_here', message: 'no such session' });
      return;
    }
    await next();
  };

  host.rootRouter.post(RUNNER_PATHS.start, authorized, async (ctx) => {
    try {
      answer(ctx, 200, await sessions.start(String(ctx.params.session_id)));
    } catch (err) {
      if (err instanceof RunnerRefusal) answer(ctx, err.status, { error_code: err.code, message: err.message });
      else if (err instanceof RunnerStartFailure) answer(ctx, 502, { error_code: err.code, message: err.message });
      else {
        log.error({ err }, 'a start request failed');
        answer(ctx, 500, { error_code: 'internal_error', message: 'internal error' });
      }
    }
  });

  host.rootRouter.post(RUNNER_PATHS.release, authorized, async (ctx) => {
    await sessions.nudge().catch((err) => log.warn({ err }, 'a release nudge failed'));
    answer(ctx, 200, {});
  });
}
