import { ReactWidget } from '@jupyterlab/apputils';
import {
  downloadIcon,
  pauseIcon,
  runIcon,
  searchIcon
} from '@jupyterlab/ui-components';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';
import * as React from 'react';
import { FixedSizeList, ListOnScrollProps } from 'react-window';

import {
  isGone,
  isRefused,
  Job,
  jobsAPI,
  logsDownloadURL,
  logStream
} from './api';
import { LogBuffer } from './logbuffer';

const ROW_HEIGHT = 18;
const RECONNECT_MS = 1000;
const MAX_RECONNECT_MS = 30_000;
const RUN_CHECK_MS = 3000; // how often a view of the latest run looks for a restart
const REPLICA_COLORS = 6;

type Status =
  | { state: 'connecting' | 'following' | 'paused' }
  | { state: 'ended'; phase: string }
  | { state: 'error'; message: string };

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
  const [job, setJob] = React.useState<Job | null>(null);
  const [paused, setPaused] = React.useState(false);
  const [status, setStatus] = React.useState<Status>({ state: 'connecting' });
  const [query, setQuery] = React.useState('');
  const [, setVersion] = React.useState(0);
  const buffer = React.useRef(new LogBuffer());
  const matches = React.useRef<{
    query: string;
    upTo: number;
    reordered: number;
    lines: number[];
  }>({ query: '', upTo: 0, reordered: 0, lines: [] });
  const list = React.useRef<FixedSizeList>(null);
  const following = React.useRef(true);
  const [box, size] = useSize<HTMLDivElement>();
  const run = props.run ?? job?.run;

  // The job, for its replicas and runs; a view of the latest run checks now
  // and then for a restart.
  const pinned = props.run !== undefined;
  React.useEffect(() => {
    const poll = new Poll({
      factory: () =>
        jobsAPI.get(name).then(setJob, error => {
          if (isGone(error)) {
            setStatus({ state: 'error', message: `${name} no longer exists` });
            void poll.stop();
          }
        }),
      frequency: { interval: pinned ? Poll.NEVER : RUN_CHECK_MS },
      standby: 'when-hidden',
      name: `jupyter-distrain:logs:${name}`
    });
    return () => poll.dispose();
  }, [name, pinned]);

  // A new replica or run starts a new buffer.
  React.useEffect(() => {
    buffer.current = new LogBuffer();
    matches.current = { query: '', upTo: 0, reordered: 0, lines: [] };
    following.current = true;
    setVersion(v => v + 1);
  }, [name, replica, run]);

  React.useEffect(() => {
    if (run === undefined) {
      return;
    }
    if (paused) {
      setStatus({ state: 'paused' });
      return;
    }
    let socket: WebSocket;
    let done = false;
    let frame = 0;
    let retry: ReturnType<typeof setTimeout>;
    let delay = RECONNECT_MS;
    const redraw = () => {
      frame ||= requestAnimationFrame(() => {
        frame = 0;
        setVersion(v => v + 1);
      });
    };
    const retryLater = () => {
      if (!done) {
        retry = setTimeout(connect, delay);
        delay = Math.min(2 * delay, MAX_RECONNECT_MS);
      }
    };
    const connect = () => {
      setStatus({ state: 'connecting' });
      let opened = false;
      socket = logStream(name, {
        replica: replica || undefined,
        cursor: buffer.current.cursor,
        run
      });
      socket.onopen = () => {
        opened = true;
        delay = RECONNECT_MS;
        setStatus({ state: 'following' });
      };
      socket.onmessage = event => {
        const message = JSON.parse(event.data);
        if (message.type === 'lines') {
          buffer.current.append(message.replica, message.data, message.offset);
          redraw();
        } else if (message.type === 'end') {
          done = true;
          // The job's phase is its latest run's: an earlier run just ended.
          setStatus({
            state: 'ended',
            phase: pinned ? '' : message.phase
          });
        } else if (message.type === 'error') {
          done = true;
          setStatus({ state: 'error', message: message.message });
        }
      };
      // Closed without a last word: retry. A stream refused before it opened
      // tells the browser nothing, so the same log is asked over HTTP (no lines):
      // refused there too (no such job, replica or run), it ends with the reason.
      socket.onclose = () => {
        if (done) {
          return;
        }
        setStatus({ state: 'connecting' });
        if (opened) {
          retryLater();
          return;
        }
        jobsAPI
          .logs(name, { replica: replica || undefined, run, tail: 0 })
          .then(retryLater, error => {
            if (!isRefused(error)) {
              retryLater();
            } else if (!done) {
              done = true;
              setStatus({ state: 'error', message: error.message });
            }
          });
      };
    };
    connect();
    return () => {
      done = true;
      clearTimeout(retry);
      cancelAnimationFrame(frame);
      socket.close();
    };
  }, [name, replica, run, paused]);

  const latest = job?.run ?? 1;
  const runs = Array.from({ length: latest - 1 }, (_, i) => latest - 1 - i);
  // The logs of the job's current run; the one shown stays listed when it has none.
  const offered = job?.logs ?? [];
  const replicas =
    !replica || offered.includes(replica) ? offered : [...offered, replica];
  const held = buffer.current;
  let rows: number[] | null = null; // line numbers shown when searching
  if (query) {
    const found = matches.current;
    if (found.query !== query || found.reordered !== held.reordered) {
      matches.current = {
        query,
        upTo: held.end,
        reordered: held.reordered,
        lines: held.search(query)
      };
    } else if (found.upTo < held.end) {
      found.lines.push(...held.search(query, found.upTo));
      found.upTo = held.end;
    }
    rows = matches.current.lines.filter(n => n >= held.first);
  }
  const count = rows ? rows.length : held.end - held.first;

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
    <div className="jp-distrain-logs">
      <div className="jp-distrain-logs-toolbar">
        {latest > 1 && (
          <select
            className="jp-mod-styled"
            aria-label="Run"
            value={props.run ?? ''}
            onChange={event =>
              props.onRun(
                event.target.value ? Number(event.target.value) : undefined
              )
            }
          >
            <option value="">Run {latest} (latest)</option>
            {runs.map(n => (
              <option key={n} value={n}>
                Run {n}
              </option>
            ))}
          </select>
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
          onClick={() => setPaused(!paused)}
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
            onChange={event => setQuery(event.target.value)}
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
        <span className="jp-distrain-logs-status" data-state={status.state}>
          {run !== undefined && latest > 1 ? `Run ${run} · ` : ''}
          {describe(status)}
          {query ? ` · ${count} matching` : ` · ${count} lines`}
          {held.first > 0
            ? ` (${held.first} earlier not kept: download for all)`
            : ''}
        </span>
      </div>
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
