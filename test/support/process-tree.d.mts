/** Types of process-tree.mjs (plain JavaScript, so that it loads before any TypeScript loader). */
export interface ProcessEntry {
  readonly pid: number;
  readonly comm: string;
  readonly state: string;
  readonly ppid: number;
  readonly pgid: number;
}
export function processTable(): ProcessEntry[];
export function descendantsOf(pid: number, table?: ProcessEntry[]): ProcessEntry[];
export function isRunning(pid: number): boolean;
export function signalDescendants(pid: number, sig: NodeJS.Signals): void;
