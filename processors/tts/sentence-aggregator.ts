/**
 * Cuts streamed LLM text into pieces worth synthesising: whole sentences, or clauses once a
 * sentence grows long, so the first audio starts early without chopping speech mid-phrase.
 * A period counts only when followed by whitespace (so "3.5" and "example.com" stay whole) and
 * not after a common abbreviation.
 */
const SENTENCE_END = /[.!?…。！？]+["'”’)\]]*(?=\s)/g;
const CLAUSE_END = /[,;:—–]+(?=\s)/g;
const ABBREVIATIONS = new Set(['mr', 'mrs', 'ms', 'dr', 'prof', 'sr', 'jr', 'st', 'vs', 'etc', 'e.g', 'i.e', 'no', 'approx']);

export const SENTENCE_DEFAULTS = {
  /** Once a pending sentence is this long (characters), cut at the last clause boundary. */
  clauseAfterChars: 120,
  /** Never emit a piece shorter than this (characters), except at flush. */
  minChars: 3,
} as const;

export class SentenceAggregator {
  private buffer = '';

  constructor(private readonly clauseAfterChars: number = SENTENCE_DEFAULTS.clauseAfterChars) {}

  /** Adds text; returns the complete pieces now available. */
  push(text: string): string[] {
    this.buffer += text;
    const out: string[] = [];
    for (;;) {
      const cut = this.findCut();
      if (cut <= 0) break;
      const piece = this.buffer.slice(0, cut).trim();
      this.buffer = this.buffer.slice(cut);
      if (piece) out.push(piece);
    }
    return out;
  }

  /** Whatever is left (end of the response). */
  flush(): string | undefined {
    const rest = this.buffer.trim();
    this.buffer = '';
    return rest || undefined;
  }

  clear(): void {
    this.buffer = '';
  }

  private findCut(): number {
    SENTENCE_END.lastIndex = 0;
    for (let m = SENTENCE_END.exec(this.buffer); m; m = SENTENCE_END.exec(this.buffer)) {
      const end = m.index + m[0].length;
      if (end < SENTENCE_DEFAULTS.minChars) continue;
      const word = /([\p{L}.]+)[.]$/u.exec(this.buffer.slice(0, m.index + 1))?.[1]?.toLowerCase();
      if (m[0].startsWith('.') && word && ABBREVIATIONS.has(word)) continue;
      return end;
    }
    if (this.buffer.length >= this.clauseAfterChars) {
      let last = -1;
      CLAUSE_END.lastIndex = 0;
      for (let m = CLAUSE_END.exec(this.buffer); m; m = CLAUSE_END.exec(this.buffer)) last = m.index + m[0].length;
      if (last >= SENTENCE_DEFAULTS.minChars) return last;
    }
    return -1;
  }
}
