import type { Knex } from 'knex';

/**
 * One batch of connects for one agent decided in one statement (server/sessions/session-store.ts,
 * issue 25): `svc_admit_batch` locks the agent's row, counts its live sessions, admits the first
 * candidates that the agent's `max_concurrency` and the caller's capacity leave room for (their
 * `agent_sessions` and `agent_calls` rows written), and returns what `retry_after_seconds` is
 * computed from when some are refused by the limit. Called alone (autocommit), the lock is held
 * until the statement's transaction commits, so the limit is exact across processes as with the
 * explicit transaction it replaces, in one round trip instead of five or six.
 *
 * VOLATILE: each statement inside takes a new snapshot, so the count after the lock sees the
 * sessions that the lock's previous holder committed (a count in the locking statement would not).
 *
 * `p_candidates`: a JSON array in arrival order of `{session_id, call_id, room, client_user_ref,
 * origin, room_provider, runner_id, metadata}`. `p_capacity`: how many of them the calling process
 * can run (its capacity leases taken for them). `outcome` is `agent_not_found`, `agent_unpublished`
 * or `decided`; `admitted` candidates were written (the first ones); `within_limit` of them passed
 * the agent's limit (those between `admitted` and it had no capacity: `server_busy`; the rest:
 * `concurrency_limit`).
 *
 * `svc_retry_after_inputs`: what `retry_after_seconds` is computed from (SessionStore's
 * `retryAfterFrom`), read by this function and by the fleet's admission transaction: the soonest
 * hard end and the oldest age among the agent's live sessions, and the median length of its
 * recent completed calls.
 */
const RETRY_AFTER_INPUTS = `
create or replace function svc_retry_after_inputs(p_agent uuid, p_sample integer)
returns table (hard_end_s double precision, oldest_age_s double precision, p50_s double precision)
language sql volatile as $fn$
  select live.hard_end_s, live.oldest_age_s, history.p50_s
    from (select extract(epoch from (min(s.started_at + make_interval(secs => s.applied_session_limit_seconds)) - now()))::float8 as hard_end_s,
                 extract(epoch from (now() - min(s.started_at)))::float8 as oldest_age_s
            from agent_sessions s where s.agent_id = p_agent and s.lease_expires_at > now()) live,
         (select percentile_cont(0.5) within group (order by extract(epoch from (r.ended_at - r.started_at))) as p50_s
            from (select ac.started_at, ac.ended_at from agent_calls ac
                   where ac.agent_id = p_agent and ac.status = 'completed' and ac.ended_at is not null
                   order by ac.started_at desc limit p_sample) r) history
$fn$`;

const FUNCTION = `
create or replace function svc_admit_batch(
  p_agent uuid,
  p_candidates jsonb,
  p_capacity integer,
  p_lease_seconds double precision,
  p_sample integer
) returns table (
  outcome text,
  organization_id uuid,
  max_concurrency integer,
  session_limit_seconds integer,
  live integer,
  within_limit integer,
  admitted integer,
  hard_end_s double precision,
  oldest_age_s double precision,
  p50_s double precision
) language plpgsql volatile as $fn$
declare
  a record;
  n integer := jsonb_array_length(p_candidates);
  v_live integer := 0;
  v_within integer;
  v_admitted integer;
  v_hard_end double precision;
  v_oldest double precision;
  v_p50 double precision;
begin
  select ag.organization_id, ag.status, ag.max_concurrency, ag.session_limit_seconds into a
    from agents ag where ag.agent_id = p_agent for update;
  if not found then
    return query select 'agent_not_found'::text, null::uuid, null::integer, null::integer, 0, 0, 0, null::float8, null::float8, null::float8;
    return;
  end if;
  if a.status <> 'published' then
    return query select 'agent_unpublished'::text, a.organization_id, a.max_concurrency, a.session_limit_seconds, 0, 0, 0, null::float8, null::float8, null::float8;
    return;
  end if;
  if a.max_concurrency = -1 then
    v_within := n;
  else
    select count(*) into v_live from agent_sessions s where s.agent_id = p_agent and s.lease_expires_at > now();
    v_within := greatest(0, least(n, a.max_concurrency - v_live));
  end if;
  v_admitted := least(v_within, greatest(p_capacity, 0));
  if v_admitted > 0 then
    insert into agent_sessions (session_id, agent_id, organization_id, room, client_user_ref, applied_session_limit_seconds,
                                call_id, status, runner_id, room_provider, origin, lease_expires_at, metadata)
      select (c.doc->>'session_id')::uuid, p_agent, a.organization_id, c.doc->>'room', c.doc->>'client_user_ref', a.session_limit_seconds,
             (c.doc->>'call_id')::uuid, 'starting', c.doc->>'runner_id', c.doc->>'room_provider', c.doc->>'origin',
             now() + make_interval(secs => p_lease_seconds), c.doc->'metadata'
        from jsonb_array_elements(p_candidates) with ordinality as c(doc, ord)
       where c.ord <= v_admitted;
    insert into agent_calls (call_id, agent_id, organization_id, session_id, applied_session_limit_seconds, client_user_ref,
                             started_at, status, participant_count, metadata)
      select (c.doc->>'call_id')::uuid, p_agent, a.organization_id, (c.doc->>'session_id')::uuid, a.session_limit_seconds,
             c.doc->>'client_user_ref', now(), 'active', 0, c.doc->'metadata'
        from jsonb_array_elements(p_candidates) with ordinality as c(doc, ord)
       where c.ord <= v_admitted;
  end if;
  if v_within < n then
    select r.hard_end_s, r.oldest_age_s, r.p50_s into v_hard_end, v_oldest, v_p50 from svc_retry_after_inputs(p_agent, p_sample) r;
  end if;
  return query select 'decided'::text, a.organization_id, a.max_concurrency, a.session_limit_seconds, v_live, v_within, v_admitted, v_hard_end, v_oldest, v_p50;
end
$fn$`;

export async function up(db: Knex): Promise<void> {
  await db.raw(RETRY_AFTER_INPUTS);
  await db.raw(FUNCTION);
}

export async function down(db: Knex): Promise<void> {
  await db.raw('drop function if exists svc_admit_batch(uuid, jsonb, integer, double precision, integer)');
  await db.raw('drop function if exists svc_retry_after_inputs(uuid, integer)');
}
