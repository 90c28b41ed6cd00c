import { ReactWidget } from '@jupyterlab/apputils';
import { ISignal, Signal } from '@lumino/signaling';
import * as React from 'react';
import {
  FixedSizeList,
  ListOnScrollProps,
  VariableSizeList
} from 'react-window';

import { LogHit } from './api';
import { ILogLine, LogBuffer } from './logbuffer';
import { Highlighted, LogHitList, useWholeSearch } from './loghits';
import { useLogStream } from './logstream';
import { LogToolbar } from './logtoolbar';
import { ROW_HEIGHT, useWrappedRows, WrappedRows } from './wrappedrows';

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
  // a hit of the whole log's search, shown in its replica's log
  const [at, setAt] = React.useState<LogHit>();
  const stream = useLogStream(name, replica, props.run, paused, at);
  const { held } = stream;
  const rows = useSearch(held, query);
  const count = rows ? rows.length : held.end - held.first;
  const [found, searchAll] = useWholeSearch(name, replica, stream.run);
  const chooseReplica = (chosen: string) => {
    setAt(undefined);
    props.onReplica(chosen);
  };
  const open = (hit: LogHit) => {
    setQuery(''); // the hit among the lines around it
    setAt(hit);
    props.onReplica(hit.replica);
  };
  return (
    <div className="jp-distrain-logs">
      <LogToolbar
        name={name}
        replica={replica}
        onReplica={chooseReplica}
        onSearchAll={() => searchAll(query)}
        pinnedRun={props.run}
        onRun={run => {
          setAt(undefined);
          searchAll('');
          props.onRun(run);
        }}
        stream={stream}
        paused={paused}
        onPause={setPaused}
        query={query}
        onQuery={setQuery}
        wrap={wrap}
        onWrap={setWrap}
        count={count}
      />
      {found && (
        <LogHitList found={found} onOpen={open} onClose={() => searchAll('')} />
      )}
      <LogLines
        held={held}
        rows={rows}
        count={count}
        replica={replica}
        query={query}
        wrap={wrap}
        hit={held.begins.at ? held.first + held.begins.at.before : undefined}
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
  /** The number of a search's hit to show, once held. */
  hit?: number;
}): JSX.Element {
  const { held, rows, count, replica, query, wrap, hit } = props;
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

  // a hit is shown once its line came, in the middle, and the end no longer
  // followed; the lines are brought into view where their page scrolls (a
  // job's view, whose log may be below the fold)
  const shownHit = React.useRef<LogBuffer>();
  React.useLayoutEffect(() => {
    if (
      hit !== undefined &&
      !rows &&
      hit < held.end &&
      shownHit.current !== held
    ) {
      shownHit.current = held;
      following.current = false;
      list.current?.scrollToItem(hit - held.first, 'center');
      outer.current?.scrollIntoView({ block: 'nearest' });
    }
  });

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
    itemData: { held, rows, replica, query, end: held.end, wrapped, hit },
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

interface IRowData {
  held: LogBuffer;
  rows: number[] | null;
  replica: string;
  query: string;
  /** Changes as lines arrive, so rows redraw. */
  end: number;
  /** The rows' heights, when wrapped. */
  wrapped: WrappedRows | null;
  /** The number of the line a search's hit opened. */
  hit?: number;
}

function LogRow(props: {
  index: number;
  style: React.CSSProperties;
  data: IRowData;
}): JSX.Element {
  const { held, rows, replica, query, wrapped, hit } = props.data;
  const { index } = props;
  const number = rows ? rows[index] : held.first + index;
  const line: ILogLine = held.at(number);
  return (
    <div
      // wrapped, as high as its line needs: measured, then laid out so
      style={wrapped ? { ...props.style, height: undefined } : props.style}
      ref={wrapped ? element => wrapped.measure(index, element) : undefined}
      className={
        'jp-distrain-logline' +
        (line.stderr ? ' jp-distrain-logline-stderr' : '') +
        (number === hit ? ' jp-distrain-logline-hit' : '')
      }
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
