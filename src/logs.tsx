import { ReactWidget } from '@jupyterlab/apputils';
import {
  downloadIcon,
  pauseIcon,
  runIcon,
  searchIcon
} from '@jupyterlab/ui-components';
import { ISignal, Signal } from '@lumino/signaling';
import * as React from 'react';
import {
  FixedSizeList,
  ListOnScrollProps,
  VariableSizeList
} from 'react-window';

import { logsDownloadURL } from './api';
import { ILogLine, LogBuffer } from './logbuffer';
import { ILogStream, Status, useLogStream } from './logstream';

const ROW_HEIGHT = 18;
const ROW_INDENT = 11; // a row's left border and padding (style/base.css)
const TIME_WIDTH = 'hh:mm:ss '.length;
const REPLICA_COLORS = 6;
const WRAP_KEY = 'jupyter-distrain:logs-wrap'; // in sessionStorage

/**
 * The numbers of the held lines that contain `query`, null without one; the lines
 * that arrive are searched as they come, all again when the query or the buffer
 * changes or its lines were reordered.
 */
function useSearch(held: LogBuffer, query: string): number[] | null {
  const found = React.useRef({
    held,
    query: '',
    upTo: 0,
    reordered: 0,
    lines: [] as number[]
  });
  if (!query) {
    return null;
  }
  const last = found.current;
  if (
    last.held !== held ||
    last.query !== query ||
    last.reordered !== held.reordered
  ) {
    found.current = {
      held,
      query,
      upTo: held.end,
      reordered: held.reordered,
      lines: held.search(query)
    };
  } else if (last.upTo < held.end) {
    last.lines.push(...held.search(query, last.upTo));
    last.upTo = held.end;
  }
  return found.current.lines.filter(n => n >= held.first);
}

/**
 * The live log of one run of a job (the latest unless `run` is given), one
 * replica or all interleaved in time order with prefixes. The server's files
 * are the buffer: pausing closes the stream and resuming reopens it at the
 * cursor, so nothing is lost; at most `capacity` lines are kept here and only
 * the visible rows are drawn. When the job is restarted, a view of the latest
 * run moves on to the new run; earlier runs stay a choice away.
 */
export function LogView(props: {
  name: string;
  replica: string;
  /** The run shown; undefined: the latest, following restarts. */
  run?: number;
  onReplica: (replica: string) => void;
  onRun: (run: number | undefined) => void;
}): JSX.Element {
  const { name, replica } = props;
  const [paused, setPaused] = React.useState(false);
  const [query, setQuery] = React.useState('');
  const [wrap, setWrap] = useWrap();
  const stream = useLogStream(name, replica, props.run, paused);
  const { held } = stream;
  const rows = useSearch(held, query);
  const count = rows ? rows.length : held.end - held.first;
  return (
    <div className="jp-distrain-logs">
      <LogToolbar
        name={name}
        replica={replica}
        onReplica={props.onReplica}
        pinnedRun={props.run}
        onRun={props.onRun}
        stream={stream}
        paused={paused}
        onPause={setPaused}
        query={query}
        onQuery={setQuery}
        wrap={wrap}
        onWrap={setWrap}
        count={count}
      />
      <LogLines
        held={held}
        rows={rows}
        count={count}
        replica={replica}
        query={query}
        wrap={wrap}
      />
    </div>
  );
}

/** Whether long lines wrap: the last choice made in this browser session. */
function useWrap(): [boolean, (wrap: boolean) => void] {
  const [wrap, setWrap] = React.useState(
    () => sessionStorage.getItem(WRAP_KEY) === 'true'
  );
  const choose = React.useCallback((value: boolean) => {
    sessionStorage.setItem(WRAP_KEY, String(value));
    setWrap(value);
  }, []);
  return [wrap, choose];
}

/**
 * The run and replica shown, pause, search, wrapping and download, and how
 * the stream stands.
 */
function LogToolbar(props: {
  name: string;
  replica: string;
  onReplica: (replica: string) => void;
  /** The run asked for; undefined: the latest. */
  pinnedRun: number | undefined;
  onRun: (run: number | undefined) => void;
  stream: ILogStream;
  paused: boolean;
  onPause: (paused: boolean) => void;
  query: string;
  onQuery: (query: string) => void;
  wrap: boolean;
  onWrap: (wrap: boolean) => void;
  /** The lines shown: all held, or those matching the query. */
  count: number;
}): JSX.Element {
  const { name, replica, paused, query, wrap } = props;
  const { job, run } = props.stream;
  const latest = job?.run ?? 1;
  // The logs of the job's current run; the one shown stays listed when it has none.
  const offered = job?.logs ?? [];
  const replicas =
    !replica || offered.includes(replica) ? offered : [...offered, replica];
  return (
    <div className="jp-distrain-logs-toolbar">
      {latest > 1 && (
        <RunChoice
          latest={latest}
          value={props.pinnedRun}
          onRun={props.onRun}
        />
      )}
      <select
        className="jp-mod-styled"
        aria-label="Replica"
        value={replica}
        onChange={event => props.onReplica(event.target.value)}
      >
        <option value="">All replicas</option>
        {replicas.map(r => (
          <option key={r} value={r}>
            {r}
          </option>
        ))}
      </select>
      <button
        className="jp-Button jp-mod-minimal"
        title={paused ? 'Resume' : 'Pause'}
        aria-label={paused ? 'Resume' : 'Pause'}
        onClick={() => props.onPause(!paused)}
      >
        {paused ? (
          <runIcon.react tag="span" elementSize="small" />
        ) : (
          <pauseIcon.react tag="span" elementSize="small" />
        )}
      </button>
      <label className="jp-distrain-logs-search">
        <searchIcon.react tag="span" elementSize="small" />
        <input
          className="jp-mod-styled"
          type="search"
          placeholder="Search"
          aria-label="Search the log"
          value={query}
          onChange={event => props.onQuery(event.target.value)}
        />
      </label>
      <button
        className="jp-Button jp-mod-minimal jp-distrain-logs-wrap"
        aria-pressed={wrap}
        title={wrap ? 'Long lines wrap' : 'Long lines scroll sideways'}
        onClick={() => props.onWrap(!wrap)}
      >
        Wrap
      </button>
      <a
        className="jp-Button jp-mod-minimal"
        href={logsDownloadURL(name, replica || undefined, run)}
        download
        title="Download the whole log"
        aria-label="Download the whole log"
      >
        <downloadIcon.react tag="span" elementSize="small" />
      </a>
      <LogStatus
        stream={props.stream}
        latest={latest}
        searching={query !== ''}
        count={props.count}
      />
    </div>
  );
}

/** The runs of a job, latest first: `value` undefined follows the latest. */
function RunChoice(props: {
  latest: number;
  value: number | undefined;
  onRun: (run: number | undefined) => void;
}): JSX.Element {
  const { latest } = props;
  const earlier = Array.from({ length: latest - 1 }, (_, i) => latest - 1 - i);
  return (
    <select
      className="jp-mod-styled"
      aria-label="Run"
      value={props.value ?? ''}
      onChange={event =>
        props.onRun(event.target.value ? Number(event.target.value) : undefined)
      }
    >
      <option value="">Run {latest} (latest)</option>
      {earlier.map(n => (
        <option key={n} value={n}>
          Run {n}
        </option>
      ))}
    </select>
  );
}

/**
 * How the stream stands, with the run when the job has several, how many lines
 * are shown (or match the search), and how many earlier ones are not kept.
 */
function LogStatus(props: {
  stream: ILogStream;
  latest: number;
  searching: boolean;
  count: number;
}): JSX.Element {
  const { run, status, held } = props.stream;
  return (
    <span className="jp-distrain-logs-status" data-state={status.state}>
      {run !== undefined && props.latest > 1 ? `Run ${run} · ` : ''}
      {describe(status)}
      {props.searching
        ? ` · ${props.count} matching`
        : ` · ${props.count} lines`}
      {held.first > 0
        ? ` (${held.first} earlier not kept: download for all)`
        : ''}
    </span>
  );
}

/**
 * The lines (`rows`, when searching) as a list that draws only the rows in
 * view; it follows the end as lines arrive, until scrolled up, and again once
 * scrolled back to the end or shown another log. Unless `wrap`, a row is one
 * line high and scrolls sideways; wrapped, each row is as high as its line
 * needs (WrappedRows). Focused, the list scrolls from the keyboard.
 */
function LogLines(props: {
  held: LogBuffer;
  rows: number[] | null;
  count: number;
  replica: string;
  query: string;
  wrap: boolean;
}): JSX.Element {
  const { held, rows, count, replica, query, wrap } = props;
  const list = React.useRef<FixedSizeList | VariableSizeList>(null);
  const outer = React.useRef<HTMLDivElement>(null);
  const following = React.useRef(true);
  const top = React.useRef(0); // the first row in view
  const [box, size] = useSize<HTMLDivElement>();
  const wrapped = useWrappedRows(wrap, outer, held, rows, replica, query);
  // Wrapped or not, the list is another one: it shows the end, or the first
  // row in view, as the one before did (and its first scroll is no user's).
  const wrapping = wrapped !== null;
  const switched = React.useRef({ wrapping, top: 0, mounted: true });
  if (switched.current.wrapping !== wrapping) {
    switched.current = { wrapping, top: top.current, mounted: false };
  }

  React.useLayoutEffect(() => {
    following.current = true;
  }, [held]);

  React.useLayoutEffect(() => {
    if (!following.current) {
      list.current?.scrollToItem(switched.current.top, 'start');
    }
  }, [wrapping]);

  React.useLayoutEffect(() => {
    wrapped?.update(list.current as VariableSizeList);
    if (following.current && count > 0) {
      list.current?.scrollToItem(count - 1, 'end');
    }
  });

  const onScroll = (scroll: ListOnScrollProps) => {
    const element = outer.current;
    if (!switched.current.mounted) {
      switched.current.mounted = true;
    } else if (!scroll.scrollUpdateWasRequested && element) {
      following.current =
        scroll.scrollOffset + element.clientHeight >=
        element.scrollHeight - ROW_HEIGHT;
    }
  };

  const common = {
    outerRef: outer,
    outerElementType: LogScroller,
    height: size.height,
    width: size.width,
    itemCount: count,
    overscanCount: 20,
    onScroll,
    onItemsRendered: (shown: { visibleStartIndex: number }) => {
      top.current = shown.visibleStartIndex;
    },
    itemData: { held, rows, replica, query, end: held.end, wrapped },
    children: LogRow
  };
  return (
    <div
      className={`jp-distrain-logs-body${wrap ? ' jp-distrain-logs-wrapped' : ''}`}
      ref={box}
    >
      {wrapped ? (
        <VariableSizeList
          {...common}
          ref={list as React.RefObject<VariableSizeList>}
          itemSize={wrapped.height}
          estimatedItemSize={ROW_HEIGHT}
        />
      ) : (
        <FixedSizeList
          {...common}
          ref={list as React.RefObject<FixedSizeList>}
          itemSize={ROW_HEIGHT}
        />
      )}
    </div>
  );
}

/** The list's scrolling element: focusable, so the keyboard scrolls it. */
const LogScroller = React.forwardRef<
  HTMLDivElement,
  React.HTMLAttributes<HTMLDivElement>
>((props, ref) => (
  <div ref={ref} tabIndex={0} role="region" aria-label="Log lines" {...props} />
));

/**
 * The heights of wrapped rows, for one buffer, width and choice of lines. A
 * row wraps at any character (style/base.css), so a line of characters of one
 * width takes as many rows of the monospace font as its length needs; a row
 * drawn is measured, and its height replaces that estimate (tabs, wide
 * characters).
 */
class WrappedRows {
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
function useWrappedRows(
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

interface IRowData {
  held: LogBuffer;
  rows: number[] | null;
  replica: string;
  query: string;
  /** Changes as lines arrive, so rows redraw. */
  end: number;
  /** The rows' heights, when wrapped. */
  wrapped: WrappedRows | null;
}

function LogRow(props: {
  index: number;
  style: React.CSSProperties;
  data: IRowData;
}): JSX.Element {
  const { held, rows, replica, query, wrapped } = props.data;
  const { index } = props;
  const line: ILogLine = held.at(rows ? rows[index] : held.first + index);
  return (
    <div
      // wrapped, as high as its line needs: measured, then laid out so
      style={wrapped ? { ...props.style, height: undefined } : props.style}
      ref={wrapped ? element => wrapped.measure(index, element) : undefined}
      className={`jp-distrain-logline${line.stderr ? ' jp-distrain-logline-stderr' : ''}`}
    >
      {line.stderr && (
        <span
          className="jp-distrain-logstderr"
          role="img"
          aria-label="stderr"
          title="Written to stderr"
        />
      )}
      {!replica && (
        <span
          className={`jp-distrain-logreplica jp-distrain-color-${color(line.replica)}`}
        >
          [{line.replica}]{' '}
        </span>
      )}
      <span className="jp-distrain-logtime" title={line.time}>
        {line.time.slice(11, 19)}{' '}
      </span>
      <Highlighted text={line.text} query={query} />
    </div>
  );
}

function describe(status: Status): string {
  switch (status.state) {
    case 'ended':
      return `${status.phase ? `Job ${status.phase}` : 'Run ended'}; all lines shown`;
    case 'error':
      return status.message;
    case 'paused':
      return 'Paused';
    case 'connecting':
      return 'Connecting…';
    case 'following':
      return 'Following';
  }
}

function Highlighted(props: { text: string; query: string }): JSX.Element {
  const at = props.query
    ? props.text.toLowerCase().indexOf(props.query.toLowerCase())
    : -1;
  if (at < 0) {
    return <>{props.text}</>;
  }
  const end = at + props.query.length;
  return (
    <>
      {props.text.slice(0, at)}
      <mark>{props.text.slice(at, end)}</mark>
      {props.text.slice(end)}
    </>
  );
}

function color(replica: string): number {
  let hash = 0;
  for (const char of replica) {
    hash = (hash * 31 + char.charCodeAt(0)) | 0;
  }
  return Math.abs(hash) % REPLICA_COLORS;
}

/** A ref for an element, and its size, kept current as it resizes. */
function useSize<T extends HTMLElement>(): [
  React.RefCallback<T>,
  { width: number; height: number }
] {
  const [size, setSize] = React.useState({ width: 0, height: 0 });
  const observer = React.useRef<ResizeObserver>();
  const ref = React.useCallback((element: T | null) => {
    observer.current?.disconnect();
    if (element) {
      observer.current = new ResizeObserver(([entry]) =>
        setSize({
          width: entry.contentRect.width,
          height: entry.contentRect.height
        })
      );
      observer.current.observe(element);
    }
  }, []);
  return [ref, size];
}

/**
 * A job's logs as a main-area tab; its `replica` ('' for all) is part of the
 * restored state.
 */
export class LogsWidget extends ReactWidget {
  constructor(
    readonly job: string,
    public replica = ''
  ) {
    super();
    this.addClass('jp-distrain-logs-widget');
  }

  /** The run shown; undefined: the latest. Not restored: a reload shows the latest. */
  run: number | undefined = undefined;

  /** Show another replica's log ('' for all). */
  choose(replica: string): void {
    this.replica = replica;
    this.update();
    this._replicaChanged.emit();
  }

  /** Show another run's log; undefined: the latest, following restarts. */
  showRun(run: number | undefined): void {
    this.run = run;
    this.update();
  }

  /** Emitted when another replica is chosen (the tab's restored state changes). */
  get replicaChanged(): ISignal<this, void> {
    return this._replicaChanged;
  }

  render(): JSX.Element {
    return (
      <LogView
        name={this.job}
        replica={this.replica}
        run={this.run}
        onReplica={replica => this.choose(replica)}
        onRun={run => this.showRun(run)}
      />
    );
  }

  private _replicaChanged = new Signal<this, void>(this);
}
