import { ApiError } from '../http/api-error.ts';
import type { Agents } from './agents.ts';
import type { Assets } from './assets.ts';

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * The agent record the widget reads without a key: published agents only, no configuration
 * internals, and a bare asset UUID in preview_url resolved to a fresh signed URL.
 */
export async function publicAgent(agents: Agents, assets: Assets, agentId: string, baseUrl: string) {
  const row = await agents.findById(agentId);
  if (!row) throw new ApiError('agent_not_found', `agent ${agentId} not found`, { agent_id: agentId });
  if (row.status !== 'published') throw new ApiError('agent_unpublished', `agent ${agentId} is not published`, { agent_id: agentId });
  const preview = row.preview_url && UUID_RE.test(row.preview_url) ? await assets.signedUrlFor(row.preview_url, row.organization_id, baseUrl) : row.preview_url;
  return {
    agent_id: row.agent_id,
    title: row.title,
    description: row.description,
    mode: row.mode,
    status: row.status,
    language: row.language,
    face_id: row.face_id,
    preview_url: preview,
    starts_conversation: row.starts_conversation,
    session_limit_seconds: row.session_limit_seconds,
    auth_enabled: row.auth_enabled,
  };
}
