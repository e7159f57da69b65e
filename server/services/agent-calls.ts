import type { Db } from '../db/connect.ts';
import { ApiError } from '../http/api-error.ts';
import { envelope, type ListEnvelope, type Page } from '../http/pagination.ts';
import type { Principal } from '../http/principal.ts';
import { toAgentCall } from './agent-record.ts';

/** Decision: the call vocabularies are the Session API's (docs/sessions.md), owned by agent/session-contract.ts. */
export { CALL_STATUSES, TERMINATION_REASONS } from '../../agent/session-contract.ts';

export interface CallFilter {
  started_after?: string;
  started_before?: string;
}

export class AgentCalls {
  constructor(private readonly db: Db) {}

  /** Call history of one agent, newest first; both bounds are exclusive. */
  async list(principal: Principal, agentId: string, filter: CallFilter, page: Page): Promise<ListEnvelope<ReturnType<typeof toAgentCall>>> {
    const agent = await this.db('agents').where({ agent_id: agentId, organization_id: principal.organizationId }).first('agent_id');
    if (!agent) throw new ApiError('agent_not_found', `agent ${agentId} not found`, { agent_id: agentId });
    const scope = this.db('agent_calls').where({ agent_id: agentId, organization_id: principal.organizationId });
    if (filter.started_after) scope.where('started_at', '>', new Date(filter.started_after));
    if (filter.started_before) scope.where('started_at', '<', new Date(filter.started_before));
    const [rows, total] = await Promise.all([
      scope.clone().orderBy([{ column: 'started_at', order: 'desc' }, { column: 'call_id' }]).limit(page.limit).offset(page.offset),
      scope.clone().count('* as n').first(),
    ]);
    return envelope(rows.map(toAgentCall), page, Number(total?.n ?? 0));
  }
}
