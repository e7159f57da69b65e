/**
 * The server's own view of a benchmark run, read from its /metrics (SVC_METRICS=public): its bots'
 * face frames by lateness, its answers to GET /v1/agents/{id} by handling time, and its event
 * loop as the capacity gate sees it. Histograms are cumulative: take one before and one after a
 * window, and `shareAbove` tells what share of what happened in between was over a bucket bound.
 */

/** Cumulative bucket counts (by `le`, seconds) of a histogram in the server's /metrics, summed over the series `keep` accepts. */
async function histogramBuckets(baseUrl: string, metric: string, keep: (labels: string) => boolean): Promise<Map<string, number>> {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  const counts = new Map<string, number>();
  for (const m of text.matchAll(new RegExp(`^${metric}_bucket\\{([^}]*)\\} (\\d+)`, 'gm'))) {
    const labels = m[1]!;
    const le = /le="([^"]+)"/.exec(labels)?.[1];
    if (le && keep(labels)) counts.set(le, (counts.get(le) ?? 0) + Number(m[2]));
  }
  return counts;
}

/** The bots' face frames by lateness. */
export const botFrameLateness = (baseUrl: string) => histogramBuckets(baseUrl, 'svc_face_frame_lateness_seconds', (labels) => labels.includes('source="bot"'));

/** The server's answers to GET /v1/agents/{id} (200) by handling time. */
export const serverGetTimes = (baseUrl: string) =>
  histogramBuckets(baseUrl, 'svc_http_request_duration_seconds', (labels) => labels.includes('method="GET"') && /route="\/v1\/agents\/:[a-z_]+"/.test(labels) && labels.includes('status="200"'));

/** Of what was counted between two scrapes, the share above the bucket bound `le` (NaN when nothing was). */
export function shareAbove(before: Map<string, number>, after: Map<string, number>, le: string): number {
  const delta = (bound: string) => (after.get(bound) ?? 0) - (before.get(bound) ?? 0);
  const total = delta('+Inf');
  return total > 0 ? 1 - delta(le) / total : Number.NaN;
}

/** The server's event loop as its capacity gate sees it now (last 2-4 s): p99 lag (ms) and utilization. */
export async function serverLoop(baseUrl: string): Promise<{ lagMs: number; elu: number }> {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  const read = (name: string) => Number(new RegExp(`^${name} (\\S+)`, 'm').exec(text)?.[1] ?? NaN);
  return { lagMs: read('svc_capacity_event_loop_lag_seconds') * 1000, elu: read('svc_capacity_event_loop_utilization') };
}
