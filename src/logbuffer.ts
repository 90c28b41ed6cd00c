import type { LogHit } from './api';

/**
 * The lines of a live log, bounded: past `capacity` lines the oldest go (the
 * whole log stays downloadable). Keeps the stream's cursor, so a stream
 * reopened after a pause or a dropped connection resumes exactly where it was.
 */
export interface ILogLine {
  replica: string;
  time: string;
  text: string;
  /** Written to the replica's standard error. */
  stderr: boolean;
}

/** What ends a line's time: a space for stdout, '!' for stderr. */
const SEPARATOR = /[ !]/;

/** Where a buffer's stream begins: each replica's last `tail` lines, or at a search's hit. */
export interface ILogStart {
  tail?: number;
  at?: LogHit;
}

export class LogBuffer {
  constructor(
    readonly capacity = 200_000,
    readonly begins: ILogStart = {}
  ) {}

  /** Whether earlier lines of the log are not held: dropped, or never streamed. */
  get cut(): boolean {
    const { tail, at } = this.begins;
    return (
      this._dropped > 0 ||
      at !== undefined ||
      (tail !== undefined && [...this._counts.values()].some(n => n >= tail))
    );
  }

  /** Lines are numbered from 0 as they arrive; the first still held. */
  get first(): number {
    return this._dropped;
  }

  /** One past the last line's number. */
  get end(): number {
    return this._dropped + this._lines.length - this._start;
  }

  /** Line number `n`, between `first` and `end`. */
  at(n: number): ILogLine {
    return this._lines[this._start + n - this._dropped];
  }

  /**
   * Add a stream message's lines ("<time> <text>\n" each, "<time>!<text>\n"
   * for stderr); `offset` is where the replica's next line starts. A
   * replica's lines come in time order, but a backlog comes a chunk per
   * replica: lines older than those held are merged in by time (equal times
   * keep their arrival order).
   */
  append(replica: string, data: string, offset: number): void {
    const incoming: ILogLine[] = [];
    for (const raw of data.split('\n')) {
      if (raw === '') {
        continue;
      }
      const end = raw.search(SEPARATOR);
      incoming.push(
        end < 0
          ? { replica, time: '', text: raw, stderr: false }
          : {
              replica,
              time: raw.slice(0, end),
              text: raw.slice(end + 1),
              stderr: raw[end] === '!'
            }
      );
    }
    const at = this._after(incoming[0]?.time ?? '');
    const tail = this._lines.splice(at);
    for (const line of tail.length ? merge(tail, incoming) : incoming) {
      this._lines.push(line);
    }
    if (tail.length) {
      this._reordered++;
    }
    this._offsets.set(replica, offset);
    this._counts.set(
      replica,
      (this._counts.get(replica) ?? 0) + incoming.length
    );
    const excess = this.end - this.first - this.capacity;
    if (excess > 0) {
      this._start += excess;
      this._dropped += excess;
    }
    // Compact once the dropped head outweighs the kept lines: amortized O(1) a line.
    if (this._start > this.capacity) {
      this._lines = this._lines.slice(this._start);
      this._start = 0;
    }
  }

  /** How many times lines were merged in before others: numbers found earlier may have moved. */
  get reordered(): number {
    return this._reordered;
  }

  /** `replica:offset,...`, the `cursor` that resumes the stream after these lines. */
  get cursor(): string {
    return [...this._offsets].map(([r, o]) => `${r}:${o}`).join(',');
  }

  /**
   * Numbers of the held lines containing `query` (case-insensitive), from line `from` on.
   */
  search(query: string, from = 0): number[] {
    const needle = query.toLowerCase();
    const found: number[] = [];
    for (let n = Math.max(from, this.first); n < this.end; n++) {
      if (this.at(n).text.toLowerCase().includes(needle)) {
        found.push(n);
      }
    }
    return found;
  }

  /** Index in `_lines` of the first held line later than `time` (a line without one: the end). */
  private _after(time: string): number {
    let low = this._start;
    let high = this._lines.length;
    if (!time) {
      return high;
    }
    while (low < high) {
      const middle = (low + high) >> 1;
      if (this._lines[middle].time > time) {
        high = middle;
      } else {
        low = middle + 1;
      }
    }
    return low;
  }

  private _lines: ILogLine[] = [];
  private _start = 0;
  private _dropped = 0;
  private _offsets = new Map<string, number>();
  /** Lines received of each replica. */
  private _counts = new Map<string, number>();
  private _reordered = 0;
}

/** Two runs of lines, each in time order, as one; on equal times `held` comes first. */
function merge(held: ILogLine[], incoming: ILogLine[]): ILogLine[] {
  const merged: ILogLine[] = [];
  let i = 0;
  let j = 0;
  while (i < held.length && j < incoming.length) {
    const next =
      incoming[j].time && incoming[j].time < held[i].time
        ? incoming[j++]
        : held[i++];
    merged.push(next);
  }
  return merged.concat(held.slice(i), incoming.slice(j));
}
