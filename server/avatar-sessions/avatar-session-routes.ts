/**
 * `POST /v1/avatar-sessions`, `GET` and `DELETE /v1/avatar-sessions/{avatar_session_id}`: the
 * REST face of `AvatarSessions` (docs/livekit-agents.md). Another organization's session is a 404.
 */
import type Router from '@koa/router';
import { ApiError } from '../http/api-error.ts';
import type { ApiRoutes } from '../http/api-routes.ts';
import { errors, pathId } from '../rest/schema/common.ts';
import { avatarSessionInputSchema, avatarSessionSchema } from './avatar-session-schema.ts';
import type { AvatarSessionInput, AvatarSessions } from './avatar-sessions.ts';

const tag = 'Avatar sessions';
const notFound = (id: string) => new ApiError('avatar_session_not_found', `avatar session ${id} not found`, { id });

export function mountAvatarSessionRoutes(api: ApiRoutes, router: Router, sessions: AvatarSessions): void {
  api.add(router, {
    method: 'post', path: '/avatar-sessions', operationId: 'createAvatarSession', tag, auth: 'api_key',
    summary: 'Put our avatar into a LiveKit Agents room',
    description:
      'The avatar joins the LiveKit room of `livekit_token`, takes the agent\'s speech from `lk.audio_stream` byte streams, and publishes the lip-synced face and the audio on behalf of the agent (LiveKit\'s avatar protocol; docs/livekit-agents.md). Answers once the avatar is in the room. ' +
      'Errors: `livekit_token_invalid` / `livekit_token_expired` (400), `model_config_not_found` (404), `livekit_url_not_allowed` (400: the URL resolves to an address the server\'s policy refuses), `livekit_join_failed` (502), `server_busy` (503, `Retry-After`).',
    body: avatarSessionInputSchema,
    responses: { 201: { description: 'The avatar is in the room', schema: avatarSessionSchema }, ...errors(400, 401, 404, 502, 503) },
  }, async ({ body, principal, ctx }) => {
    const receivedAtMs = Date.now();
    const view = await sessions.create({ organizationId: principal.organizationId, principal: principal.createdBy, apiKeyId: principal.apiKeyId }, body as AvatarSessionInput, receivedAtMs);
    ctx.set('Location', `/v1/avatar-sessions/${view['avatar_session_id'] as string}`);
    return { status: 201, body: view };
  });

  api.add(router, {
    method: 'get', path: '/avatar-sessions/:avatar_session_id', operationId: 'getAvatarSession', tag, auth: 'api_key',
    summary: 'Read an avatar session (status, end reason, figures)',
    params: pathId('avatar_session_id'),
    responses: { 200: { description: 'The session', schema: avatarSessionSchema }, ...errors(400, 401, 404) },
  }, async ({ params, principal }) => {
    const view = sessions.get(principal.organizationId, params.avatar_session_id);
    if (!view) throw notFound(params.avatar_session_id);
    return { status: 200, body: view };
  });

  api.add(router, {
    method: 'delete', path: '/avatar-sessions/:avatar_session_id', operationId: 'deleteAvatarSession', tag, auth: 'api_key',
    summary: 'End an avatar session (the avatar leaves the room)',
    description: 'Idempotent: an ended session is returned as it is.',
    params: pathId('avatar_session_id'),
    responses: { 200: { description: 'The ended session', schema: avatarSessionSchema }, ...errors(400, 401, 404) },
  }, async ({ params, principal }) => {
    const view = await sessions.delete(principal.organizationId, params.avatar_session_id);
    if (!view) throw notFound(params.avatar_session_id);
    return { status: 200, body: view };
  });
}
