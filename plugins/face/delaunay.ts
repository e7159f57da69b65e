/**
 * Delaunay triangulation (Bowyer-Watson) of the face mesh's rest points. Runs once per
 * reference rig on ~150 points, so the simple quadratic algorithm is plenty.
 */
interface Tri {
  a: number;
  b: number;
  c: number;
  cx: number;
  cy: number;
  r2: number;
}

function circumcircle(xs: Float64Array, ys: Float64Array, a: number, b: number, c: number): Tri {
  const ax = xs[a]!, ay = ys[a]!, bx = xs[b]!, by = ys[b]!, cx = xs[c]!, cy = ys[c]!;
  const d = 2 * (ax * (by - cy) + bx * (cy - ay) + cx * (ay - by));
  if (Math.abs(d) < 1e-12) return { a, b, c, cx: 0, cy: 0, r2: Number.POSITIVE_INFINITY };
  const a2 = ax * ax + ay * ay, b2 = bx * bx + by * by, c2 = cx * cx + cy * cy;
  const ux = (a2 * (by - cy) + b2 * (cy - ay) + c2 * (ay - by)) / d;
  const uy = (a2 * (cx - bx) + b2 * (ax - cx) + c2 * (bx - ax)) / d;
  return { a, b, c, cx: ux, cy: uy, r2: (ax - ux) ** 2 + (ay - uy) ** 2 };
}

/** Returns triangles as index triples into `points` ([x0, y0, x1, y1, ...]). */
export function delaunay(points: ArrayLike<number>): Uint16Array {
  const n = points.length / 2;
  const xs = new Float64Array(n + 3), ys = new Float64Array(n + 3);
  let minX = Infinity, minY = Infinity, maxX = -Infinity, maxY = -Infinity;
  for (let i = 0; i < n; i++) {
    xs[i] = points[2 * i]!;
    ys[i] = points[2 * i + 1]!;
    minX = Math.min(minX, xs[i]!); maxX = Math.max(maxX, xs[i]!);
    minY = Math.min(minY, ys[i]!); maxY = Math.max(maxY, ys[i]!);
  }
  const span = Math.max(maxX - minX, maxY - minY) * 20 + 1;
  const midX = (minX + maxX) / 2, midY = (minY + maxY) / 2;
  xs[n] = midX - span; ys[n] = midY - span;
  xs[n + 1] = midX + span; ys[n + 1] = midY - span;
  xs[n + 2] = midX; ys[n + 2] = midY + span;
  let tris: Tri[] = [circumcircle(xs, ys, n, n + 1, n + 2)];
  for (let p = 0; p < n; p++) {
    const px = xs[p]!, py = ys[p]!;
    const bad: Tri[] = [];
    const keep: Tri[] = [];
    for (const t of tris) ((px - t.cx) ** 2 + (py - t.cy) ** 2 < t.r2 ? bad : keep).push(t);
    // The hole's boundary: edges of bad triangles not shared by another bad triangle.
    const edges = new Map<string, [number, number]>();
    for (const t of bad) {
      for (const [u, v] of [[t.a, t.b], [t.b, t.c], [t.c, t.a]] as Array<[number, number]>) {
        const key = u < v ? `${u},${v}` : `${v},${u}`;
        if (edges.has(key)) edges.delete(key);
        else edges.set(key, [u, v]);
      }
    }
    for (const [u, v] of edges.values()) keep.push(circumcircle(xs, ys, u, v, p));
    tris = keep;
  }
  const out: number[] = [];
  for (const t of tris) {
    if (t.a >= n || t.b >= n || t.c >= n) continue;
    out.push(t.a, t.b, t.c);
  }
  return Uint16Array.from(out);
}
