import { randomBytes, randomUUID } from 'node:crypto';
import type { Registry } from '../../core/registry.ts';
import type { Knex } from 'knex';
import type { Db } from '../db/connect.ts';
import { preparedQuery } from '../db/prepared-query.ts';
import { ApiError } from '../http/api-error.ts';
import type { JsonText } from '../http/json-text.ts';
import { envelopeText, type ListEnvelope, type Page } from '../http/pagination.ts';
import type { Principal } from '../http/principal.ts';
import { TURN_DEFAULTS } from '../../processors/turns/turn-processor.ts';
import { VAD_DEFAULTS } from '../../processors/vad/vad-processor.ts';
import { AGENT_LIMITS } from '../rest/schema/agents.ts';
import type { SecretBox } from '../security/secret-box.ts';
import { AGENT_DEFAULTS } from './agent-defaults.ts';
import { AGENT_SUMMARY_COLUMNS, toAgent, type Agent, type AgentSummary } from './agent-record.ts';
import { loadTools, normaliseTools, replaceTools, toTool, type ToolInput } from './agent-tools.ts';
import { TEMPLATE_ORGANIZATION } from './organizations.ts';

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** A hostname with optional port, `*.` wildcard subdomains, or `*` for every origin. */
/**
 * An `allowed_hostnames` entry: `*`, a DNS name or IPv4 address, or an IPv6 address in brackets.
 * The Session API compares the Origin's hostname with entries exactly (docs/sessions.md), so
 * wildcard prefixes (`*.example.com`) and ports, which could never match, are refused.
 */
const HOSTNAME_RE = /^(\*|[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*|\[[0-9a-f:.]{2,45}\])$/i;

// One round trip returns the page as JSON text built by PostgreSQL and the total as a scalar
// subquery (`count(*) over()` made PostgreSQL fetch and sort every agent of the organization for
// each page: 1.6x slower, measured). Turning 20 rows into objects and back into JSON was about a
// quarter of the list's CPU time in Node, the one thread every request shares; `row_to_json` of each
// summary (named as the API names its fields) costs PostgreSQL less than that, and less than
// `json_build_object` (measured with pgbench). Timestamps leave PostgreSQL in the API's ISO form;
// the page is chosen and aggregated in the order of the columns, never of their text.
const ISO_MS = `'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'`;
const summaryColumn = (c: string) => (c === 'created_at' || c === 'updated_at' ? `to_char(a.${c} at time zone 'UTC', ${ISO_MS}) as ${c}` : `a.${c}`);
const LIST_SQL = `select (select count(*) from agents where organization_id = ?) as total_items,
  coalesce((select json_agg(page.item order by page.created_at desc, page.agent_id)::text
    from (select a.created_at, a.agent_id, (select row_to_json(item) from (select ${AGENT_SUMMARY_COLUMNS.map(summaryColumn).join(', ')}) item) as item
      from agents a where a.organization_id = ? order by a.created_at desc, a.agent_id limit ? offset ?) page), '[]') as data`;
const GET_SQL = `select a.*, coalesce((select json_agg(t order by t.position) from agent_tools t where t.agent_id = a.agent_id), '[]'::json) as tool_rows
  from agents a where a.agent_id = ? and a.organization_id = ?`;
/** Every connect reads its agent first (the Session API's hot path): a prepared statement. */
const FIND_BY_ID_SQL = 'select * from agents where agent_id = ? limit 1';

const JSON_COLUMNS = ['behaviour', 'advanced', 'provider_config', 'allowed_hostnames'] as const;

export type AgentFields = Record<string, any> & { tools?: ToolInput[] };

const fieldError = (field: string, message: string, extra: Record<string, unknown> = {}) =>
  new ApiError('validation_failed', `${field}: ${message}`, { issues: [{ location: 'body', path: `/${field}`, message }], ...extra });

/** Agents of an organization: every read and write is scoped by `principal.organizationId`. */
export class Agents {
  constructor(
    private readonly db: Db,
    private readonly secrets: SecretBox,
    private readonly registry: Registry,
  ) {}

  async list(principal: Principal, page: Page): Promise<JsonText<ListEnvelope<AgentSummary>>> {
    const [row] = await preparedQuery(this.db, 'agents.list', LIST_SQL, [principal.organizationId, principal.organizationId, page.limit, page.offset]);
    return envelopeText(row.data, page, Number(row.total_items));
  }

  /** The agent and its tools in one round trip. */
  async get(principal: Principal, agentId: string): Promise<Agent> {
    const [row] = await preparedQuery(this.db, 'agents.get', GET_SQL, [agentId, principal.organizationId]);
    if (!row) throw notFound(agentId);
    return toAgent(row, (row.tool_rows as any[]).map(toTool));
  }

  async create(principal: Principal, body: AgentFields & { preset_id?: string }): Promise<Agent> {
    const { preset_id, ...fields } = body;
    const preset = preset_id ? await this.preset(principal, preset_id) : undefined;
    const presetTools = preset ? await loadTools(this.db, preset.agent_id) : [];
    const agentId = randomUUID();
    const base: Record<string, unknown> = { ...AGENT_DEFAULTS };
    if (preset) {
      for (const key of Object.keys(AGENT_DEFAULTS)) if (key !== 'status') base[key] = preset[key];
      base.sts_api_key_encrypted = preset.organization_id === principal.organizationId ? preset.sts_api_key_encrypted : null;
    }
    await this.validateFields(principal, fields);
    const merged = { ...base, ...this.columnsFrom(fields, base) };
    let authSecret: string | null = null;
    if (merged.auth_enabled) {
      authSecret = newAuthSecret();
      merged.auth_secret_encrypted = this.secrets.seal(authSecret);
    }
    const tools = fields.tools
      ? normaliseTools(fields.tools)
      : normaliseTools(presetTools.map(({ tool_id: _ignored, ...t }) => t as ToolInput));
    const row = {
      ...serialiseJson(merged),
      agent_id: agentId,
      organization_id: principal.organizationId,
      created_by: principal.createdBy,
      status: AGENT_DEFAULTS.status,
    };
    // Agent, face reference and tools commit together.
    await this.db.transaction(async (trx) => {
      if (merged.face_id != null) await lockFace(trx, principal, String(merged.face_id));
      await trx('agents').insert(row);
      if (tools.length) await replaceTools(trx, agentId, tools);
    });
    return { ...(await this.get(principal, agentId)), auth_secret: authSecret };
  }

  async update(principal: Principal, agentId: string, fields: AgentFields): Promise<Agent> {
    await this.validateFields(principal, fields);
    const tools = fields.tools ? normaliseTools(fields.tools) : undefined;
    let authSecret: string | null = null;
    await this.db.transaction(async (trx) => {
      const current = await trx('agents').where({ agent_id: agentId, organization_id: principal.organizationId }).forUpdate().first();
      if (!current) throw notFound(agentId);
      const changes: Record<string, unknown> = this.columnsFrom(fields, current);
      if (fields.face_id != null) await lockFace(trx, principal, fields.face_id);
      // Turning auth on without a stored secret creates one, shown once in this response.
      if (fields.auth_enabled === true && current.auth_secret_encrypted == null) {
        authSecret = newAuthSecret();
        changes.auth_secret_encrypted = this.secrets.seal(authSecret);
      }
      await trx('agents').where({ agent_id: agentId }).update({ ...serialiseJson(changes), updated_at: trx.fn.now() });
      if (tools) await replaceTools(trx, agentId, tools);
    });
    return { ...(await this.get(principal, agentId)), auth_secret: authSecret };
  }

  /**
   * Replaces the agent's connect auth secret (creates one if none is stored) and returns it once,
   * as `auth_secret`: connect tokens signed with the old secret are refused from the next connect
   * on (admission reads the secret from the database every time). `auth_enabled` is unchanged.
   */
  async rotateAuthSecret(principal: Principal, agentId: string): Promise<Agent> {
    const authSecret = newAuthSecret();
    const n = await this.db('agents')
      .where({ agent_id: agentId, organization_id: principal.organizationId })
      .update({ auth_secret_encrypted: this.secrets.seal(authSecret), updated_at: this.db.fn.now() });
    if (!n) throw notFound(agentId);
    return { ...(await this.get(principal, agentId)), auth_secret: authSecret };
  }

  async setStatus(principal: Principal, agentId: string, status: 'published' | 'unpublished'): Promise<Agent> {
    const n = await this.db('agents')
      .where({ agent_id: agentId, organization_id: principal.organizationId })
      .update({ status, updated_at: this.db.fn.now() });
    if (!n) throw notFound(agentId);
    return this.get(principal, agentId);
  }

  /** Hard delete; refused while a session lease is live. The row lock serialises with admission. */
  async delete(principal: Principal, agentId: string): Promise<void> {
    await this.db.transaction(async (trx) => {
      const row = await trx('agents').where({ agent_id: agentId, organization_id: principal.organizationId }).forUpdate().first('agent_id');
      if (!row) throw notFound(agentId);
      const active = await trx('agent_sessions').where('agent_id', agentId).where('lease_expires_at', '>', trx.fn.now()).count('* as n').first();
      const count = Number(active?.n ?? 0);
      if (count > 0) {
        throw new ApiError('agent_has_active_sessions', `agent ${agentId} has ${count} active session(s)`, { active_sessions: count });
      }
      await trx('agents').where({ agent_id: agentId }).delete();
    });
  }

  /** The decrypted provider key, for provider verification and the session runner. */
  async providerKey(principal: Principal, agentId: string): Promise<{ row: any; apiKey: string | null }> {
    const row = await this.row(principal, agentId);
    return { row, apiKey: row.sts_api_key_encrypted ? this.secrets.open(row.sts_api_key_encrypted) : null };
  }

  /** The plaintext auth secret of an agent row (for the Session API), or null when none is stored. */
  authSecretOf(row: { auth_secret_encrypted?: string | null }): string | null {
    return row.auth_secret_encrypted ? this.secrets.open(row.auth_secret_encrypted) : null;
  }

  /** Agent row by id without organization scope (public and Session API reads). */
  async findById(agentId: string): Promise<any | undefined> {
    const [row] = await preparedQuery(this.db, 'agents.findById', FIND_BY_ID_SQL, [agentId]);
    return row;
  }

  private async row(principal: Principal, agentId: string): Promise<any> {
    const row = await this.db('agents').where({ agent_id: agentId, organization_id: principal.organizationId }).first();
    if (!row) throw notFound(agentId);
    return row;
  }

  /** A preset is an agent of the template organization or of the caller's own organization. */
  private async preset(principal: Principal, presetId: string): Promise<any> {
    const row = await this.db('agents')
      .where('agent_id', presetId)
      .whereIn('organization_id', [principal.organizationId, TEMPLATE_ORGANIZATION.organization_id])
      .first();
    if (!row) throw new ApiError('not_found', `preset ${presetId} not found`, { preset_id: presetId });
    return row;
  }

  /** Rules the JSON Schema cannot express. */
  private async validateFields(principal: Principal, fields: AgentFields): Promise<void> {
    if (fields.sts_provider != null && !this.registry.has('sts', fields.sts_provider)) {
      const known = this.registry.slugs('sts');
      throw fieldError('sts_provider', `unknown speech-to-speech provider "${fields.sts_provider}"; known: ${known.join(', ') || '(none)'}`, { known });
    }
    // Checked against the installed TTS plugins when the registry has any (a bare REST server
    // without the speech pipeline accepts any well-formed slug).
    const ttsSlugs = this.registry.slugs('tts');
    if (fields.tts_provider !== undefined && ttsSlugs.length && !ttsSlugs.includes(fields.tts_provider)) {
      throw fieldError('tts_provider', `unknown TTS provider "${fields.tts_provider}"; known: ${ttsSlugs.join(', ')}`, { known: ttsSlugs });
    }
    if (fields.preview_url != null && !UUID_RE.test(fields.preview_url) && !isHttpUrl(fields.preview_url)) {
      throw fieldError('preview_url', 'must be an http(s) URL or an asset id (UUID)');
    }
    for (const [i, host] of (fields.allowed_hostnames ?? []).entries()) {
      if (!HOSTNAME_RE.test(host)) throw fieldError(`allowed_hostnames/${i}`, `"${host}" is not a hostname (no scheme, port, path or wildcard prefix: entries match the Origin's hostname exactly; "*" allows every origin)`);
    }
    if (fields.provider_config && Buffer.byteLength(JSON.stringify(fields.provider_config)) > AGENT_LIMITS.providerConfigMaxBytes) {
      throw fieldError('provider_config', `exceeds ${AGENT_LIMITS.providerConfigMaxBytes} bytes`);
    }
    if (fields.face_id != null) {
      const config = await this.db('model_configs')
        .where('model_config_id', fields.face_id)
        .whereIn('organization_id', [principal.organizationId, TEMPLATE_ORGANIZATION.organization_id])
        .first('model_config_id');
      if (!config) throw fieldError('face_id', `no model configuration ${fields.face_id} is visible to this organization`);
    }
  }

  /** Maps request fields to column values; `behaviour` and `advanced` merge into `current`. */
  private columnsFrom(fields: AgentFields, current: Record<string, any>): Record<string, unknown> {
    const columns: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(fields)) {
      if (key === 'tools') continue;
      if (key === 'sts_api_key') columns.sts_api_key_encrypted = value == null ? null : this.secrets.seal(value);
      else if (key === 'behaviour' || key === 'advanced') columns[key] = { ...(current[key] ?? {}), ...value };
      else columns[key] = value;
    }
    if (columns.advanced) checkTurnBounds(columns.advanced as Record<string, unknown>);
    return columns;
  }
}

/** The turn bounds, as merged: each at least the one before it (else a wait could never happen). */
function checkTurnBounds(advanced: Record<string, unknown>): void {
  const order = ['turn_pause_ms', 'turn_unsure_ms', 'turn_incomplete_ms'] as const;
  const defaults = { turn_pause_ms: VAD_DEFAULTS.stopMs, turn_unsure_ms: TURN_DEFAULTS.unsureMs, turn_incomplete_ms: TURN_DEFAULTS.incompleteMs };
  const value = (k: (typeof order)[number]) => (typeof advanced[k] === 'number' ? (advanced[k] as number) : defaults[k]);
  for (let i = 1; i < order.length; i++) {
    if (value(order[i]!) < value(order[i - 1]!)) {
      throw fieldError(`advanced/${order[i]}`, `must be at least ${order[i - 1]} (${value(order[i - 1]!)}), got ${value(order[i]!)}`);
    }
  }
}

const notFound = (agentId: string) => new ApiError('agent_not_found', `agent ${agentId} not found`, { agent_id: agentId });

/**
 * The configuration an agent is about to reference, locked (FOR SHARE) until the agent's write
 * commits: a DELETE of it (which locks it FOR UPDATE before counting its agents) waits and then
 * sees the reference (409), or, having deleted it first, leaves nothing to lock (400 here). Before,
 * a PATCH checked the configuration, the DELETE ran, and the agent kept a dangling face_id.
 */
async function lockFace(trx: Knex.Transaction, principal: Principal, faceId: string): Promise<void> {
  const config = await trx('model_configs')
    .where('model_config_id', faceId)
    .whereIn('organization_id', [principal.organizationId, TEMPLATE_ORGANIZATION.organization_id])
    .forShare()
    .first('model_config_id');
  if (!config) throw fieldError('face_id', `no model configuration ${faceId} is visible to this organization`);
}

const newAuthSecret = () => `svc_as_${randomBytes(32).toString('base64url')}`;

function isHttpUrl(value: string): boolean {
  try {
    const url = new URL(value);
    return url.protocol === 'http:' || url.protocol === 'https:';
  } catch {
    return false;
  }
}

function serialiseJson(columns: Record<string, unknown>): Record<string, unknown> {
  const out = { ...columns };
  for (const key of JSON_COLUMNS) if (key in out && out[key] != null) out[key] = JSON.stringify(out[key]);
  return out;
}
