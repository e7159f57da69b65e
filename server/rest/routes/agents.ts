import type Router from '@koa/router';
import type { Registry } from '../../../core/registry.ts';
import type { ApiRoutes } from '../../http/api-routes.ts';
import {
  agentCallSchema, agentSchema, agentStatusBody, agentSummarySchema, createAgentBody, patchAgentBody, providerDescriptorSchema, verifyProviderResponse,
} from '../schema/agents.ts';
import { dateTime, errors, listOf, listQuery, pathId } from '../schema/common.ts';
import type { Services } from '../../services/index.ts';
import { verifyProvider } from '../../services/provider-verification.ts';
import { listProviders } from '../../services/sts-providers.ts';

export function mountAgentRoutes(api: ApiRoutes, router: Router, { agents, agentCalls }: Services, registry: Registry): void {
  const tag = 'Agents';
  const agentId = pathId('agent_id');

  // Before /agents/:agent_id, which would reject "providers" as an agent id.
  api.add(router, {
    method: 'get', path: '/agents/providers', operationId: 'listStsProviders', tag, auth: 'api_key',
    summary: 'Speech-to-speech providers available to third_party agents',
    responses: { 200: { description: 'Provider descriptors', schema: { type: 'array', items: providerDescriptorSchema } }, ...errors(401) },
  }, async () => ({ status: 200, body: listProviders(registry) }));

  api.add(router, {
    method: 'get', path: '/agents', operationId: 'listAgents', tag, auth: 'api_key',
    summary: 'List agents (summary fields only)', query: listQuery(),
    responses: { 200: { description: 'Page of agent summaries', schema: listOf(agentSummarySchema) }, ...errors(400, 401) },
  }, async ({ principal, query }) => ({ status: 200, body: await agents.list(principal, query) }));

  api.add(router, {
    method: 'post', path: '/agents', operationId: 'createAgent', tag, auth: 'api_key',
    summary: 'Create an agent', description: 'Takes title (required), mode, preset_id, and any field PATCH accepts. Includes `auth_secret` once when auth_enabled.',
    body: createAgentBody,
    responses: { 201: { description: 'The new agent', schema: agentSchema }, ...errors(400, 401, 404) },
  }, async ({ principal, body }) => ({ status: 201, body: await agents.create(principal, body) }));

  api.add(router, {
    method: 'get', path: '/agents/:agent_id', operationId: 'getAgent', tag, auth: 'api_key',
    summary: 'Get an agent with its tools', params: agentId,
    responses: { 200: { description: 'The agent', schema: agentSchema }, ...errors(400, 401, 404) },
  }, async ({ principal, params }) => ({ status: 200, body: await agents.get(principal, params.agent_id) }));

  api.add(router, {
    method: 'patch', path: '/agents/:agent_id', operationId: 'updateAgent', tag, auth: 'api_key',
    summary: 'Partially update an agent', description: '`tools` is a full replace matched by function.name (tool_id kept for existing names); omit it to leave tools untouched. `behaviour` and `advanced` merge key by key.',
    params: agentId, body: patchAgentBody,
    responses: { 200: { description: 'The updated agent', schema: agentSchema }, ...errors(400, 401, 404) },
  }, async ({ principal, params, body }) => ({ status: 200, body: await agents.update(principal, params.agent_id, body) }));

  api.add(router, {
    method: 'delete', path: '/agents/:agent_id', operationId: 'deleteAgent', tag, auth: 'api_key',
    summary: 'Hard delete an agent (409 while it has active sessions)', params: agentId,
    responses: { 204: { description: 'Deleted' }, ...errors(400, 401, 404, 409) },
  }, async ({ principal, params }) => {
    await agents.delete(principal, params.agent_id);
    return { status: 204 };
  });

  api.add(router, {
    method: 'patch', path: '/agents/:agent_id/status', operationId: 'setAgentStatus', tag, auth: 'api_key',
    summary: 'Publish or unpublish an agent', params: agentId, body: agentStatusBody,
    responses: { 200: { description: 'The agent', schema: agentSchema }, ...errors(400, 401, 404) },
  }, async ({ principal, params, body }) => ({ status: 200, body: await agents.setStatus(principal, params.agent_id, body.status) }));

  api.add(router, {
    method: 'post', path: '/agents/:agent_id/rotate-auth-secret', operationId: 'rotateAgentAuthSecret', tag, auth: 'api_key',
    summary: 'Replace the connect auth secret; the new one is returned once',
    description: 'Generates a new `auth_secret` (also for an agent that had none), returned in this response only. Connect tokens signed with the previous secret are refused from the next connect on; sessions already running are not ended. `auth_enabled` is unchanged. No body.',
    params: agentId,
    responses: { 200: { description: 'The agent, with the new auth_secret', schema: agentSchema }, ...errors(400, 401, 404) },
  }, async ({ principal, params }) => ({ status: 200, body: await agents.rotateAuthSecret(principal, params.agent_id) }));

  api.add(router, {
    method: 'get', path: '/agents/:agent_id/calls', operationId: 'listAgentCalls', tag, auth: 'api_key',
    summary: 'Call history of an agent, newest first', params: agentId,
    query: listQuery({
      started_after: { ...dateTime, description: 'Only calls that started strictly after this time.' },
      started_before: { ...dateTime, description: 'Only calls that started strictly before this time.' },
    }),
    responses: { 200: { description: 'Page of calls', schema: listOf(agentCallSchema) }, ...errors(400, 401, 404) },
  }, async ({ principal, params, query }) => ({ status: 200, body: await agentCalls.list(principal, params.agent_id, query, query) }));

  api.add(router, {
    method: 'post', path: '/agents/:agent_id/verify-provider', operationId: 'verifyAgentProvider', tag, auth: 'api_key',
    summary: "Live check of the agent's stored provider key and config id (never modifies the agent)", params: agentId,
    responses: { 200: { description: 'Verification result', schema: verifyProviderResponse }, ...errors(400, 401, 404) },
  }, async ({ principal, params }) => ({ status: 200, body: await verifyProvider(agents, registry, principal, params.agent_id) }));
}
