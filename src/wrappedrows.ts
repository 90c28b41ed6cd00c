/**
 * The heights of a log's rows when long lines wrap: estimated from each line's
 * length in the log's monospace font, then taken from the rows as drawn.
 */
import * as React from 'react';
import { VariableSizeList } from 'react-window';

import { LogBuffer } from './logbuffer';

/** A row's height when it is one line high. */
export const ROW_HEIGHT = 18;
const ROW_INDENT = 11; // a row's left border and padding (style/base.css)
const TIME_WIDTH = 'hh:mm:ss '.length;

/**
 * The heights of wrapped rows, for one buffer, width and choice of lines. A
 * row wraps at any character (style/base.css), so a line of characters of one
 * width takes as many rows of the monospace font as its length needs; a row
 * drawn is measured, and its height replaces that estimate (tabs, wide
 * characters).
 */
export class WrappedRows {
  constructor(
    readonly key: string,
    readonly held: LogBuffer,
    /** Characters in a row. */
    readonly columns: number,
    /** Each line has its replica's prefix. */
    readonly prefixed: boolean
  ) {}

  /** The line numbers shown (when searching), as of the last draw. */
  rows: number[] | null = null;

  /** Row `index`'s height in pixels. */
  readonly height = (index: number): number => {
    const n = this.line(index);
    const measured = this._measured.get(n);
    if (measured !== undefined) {
      return measured;
    }
    const line = this.held.at(n);
    const length =
      TIME_WIDTH +
      (this.prefixed ? line.replica.length + 3 : 0) +
      line.text.length;
    return ROW_HEIGHT * Math.max(1, Math.ceil(length / this.columns));
  };

  /** Take the height of row `index` as drawn. */
  measure(index: number, element: HTMLElement | null): void {
    const height = element?.offsetHeight;
    if (height && height !== this.height(index)) {
      this._measured.set(this.line(index), height);
      this._changed = Math.min(this._changed, index);
    }
  }

  /**
   * After a draw: lay the list out again from the first row whose height
   * changed (from the first row, the first time).
   */
  update(list: VariableSizeList | null): void {
    if (this._changed < Infinity) {
      list?.resetAfterIndex(this._changed, true);
      this._changed = Infinity;
    }
  }

  private line(index: number): number {
    return this.rows ? this.rows[index] : this.held.first + index;
  }

  private _measured = new Map<number, number>();
  private _changed = 0;
}

/**
 * The heights of the rows while `wrap`, else null. They are new (and the list
 * laid out again) when the list's width or the lines shown change otherwise
 * than by lines added at the end: another buffer, the oldest lines dropped,
 * lines merged in before others, another search or replica.
 */
export function useWrappedRows(
  wrap: boolean,
  outer: React.RefObject<HTMLDivElement>,
  held: LogBuffer,
  rows: number[] | null,
  replica: string,
  query: string
): WrappedRows | null {
  const [columns, setColumns] = React.useState(0);
  const glyph = React.useRef(0);
  const current = React.useRef<WrappedRows | null>(null);
  React.useLayoutEffect(() => {
    if (wrap && outer.current) {
      glyph.current ||= charWidth(outer.current);
      const inside = outer.current.clientWidth - ROW_INDENT;
      setColumns(Math.max(1, Math.floor(inside / glyph.current)));
    }
  });
  if (!wrap || !columns) {
    current.current = null;
    return null;
  }
  const key = [columns, held.first, held.reordered, replica, query].join();
  if (current.current?.key !== key || current.current.held !== held) {
    current.current = new WrappedRows(key, held, columns, !replica);
  }
  current.current.rows = rows;
  return current.current;
}

/** The width of a character of the log's monospace font, in pixels. */
function charWidth(list: HTMLElement): number {
  const probe = document.createElement('span');
  probe.className = 'jp-distrain-logline jp-distrain-logprobe';
  probe.textContent = '0'.repeat(100);
  list.appendChild(probe);
  const width = probe.getBoundingClientRect().width / 100;
  probe.remove();
  return width || 8;
}
