import { ReactWidget } from '@jupyterlab/apputils';
import {
  downloadIcon,
  pauseIcon,
  runIcon,
  searchIcon
} from '@jupyterlab/ui-components';
import { ISignal, Signal } from '@lumino/signaling';
import * as React from 'react';
import { FixedSizeList, ListOnScrollProps } from 'react-window';

import { logsDownloadURL } from './api';
import { LogBuffer } from './logbuffer';
import { ILogStream, Status, useLogStream } from './logstream';

const ROW_HEIGHT = 18;
const REPLICA_COLORS = 6;

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
        count={count}
      />
      <LogLines
        held={held}
        rows={rows}
        count={count}
        replica={replica}
        query={query}
      />
    </div>
  );
}

/**
 * The run and replica shown, pause, search and download, and how the stream
 * stands.
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
  /** The lines shown: all held, or those matching the query. */
  count: number;
}): JSX.Element {
  const { name, replica, paused, query } = props;
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
 * scrolled back to the end or shown another log.
 */
function LogLines(props: {
  held: LogBuffer;
  rows: number[] | null;
  count: number;
  replica: string;
  query: string;
}): JSX.Element {
  const { held, rows, count, replica, query } = props;
  const list = React.useRef<FixedSizeList>(null);
  const following = React.useRef(true);
  const [box, size] = useSize<HTMLDivElement>();

  React.useLayoutEffect(() => {
    following.current = true;
  }, [held]);

  React.useLayoutEffect(() => {
    if (following.current && count > 0) {
      list.current?.scrollToItem(count - 1, 'end');
    }
  });

  const onScroll = (scroll: ListOnScrollProps) => {
    if (!scroll.scrollUpdateWasRequested) {
      following.current =
        scroll.scrollOffset + size.height >= count * ROW_HEIGHT - ROW_HEIGHT;
    }
  };

  return (
    <div className="jp-distrain-logs-body" ref={box}>
      <FixedSizeList
        ref={list}
        height={size.height}
        width={size.width}
        itemCount={count}
        itemSize={ROW_HEIGHT}
        overscanCount={20}
        onScroll={onScroll}
        itemData={{ held, rows, replica, query, end: held.end }}
      >
        {LogRow}
      </FixedSizeList>
    </div>
  );
}

interface IRowData {
  held: LogBuffer;
  rows: number[] | null;
  replica: string;
  query: string;
  /** Changes as lines arrive, so rows redraw. */
  end: number;
}

function LogRow(props: {
  index: number;
  style: React.CSSProperties;
  data: IRowData;
}): JSX.Element {
  const { held, rows, replica, query } = props.data;
  const line = held.at(rows ? rows[props.index] : held.first + props.index);
  return (
    <div style={props.style} className="jp-distrain-logline">
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
