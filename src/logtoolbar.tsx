/**
 * The log view's toolbar: the run and replica shown, pause, search, wrapping,
 * download, and how the stream stands.
 */
import {
  downloadIcon,
  pauseIcon,
  runIcon,
  searchIcon
} from '@jupyterlab/ui-components';
import * as React from 'react';

import { logsDownloadURL } from './api';
import { ILogStream, Status } from './logstream';

/**
 * The run and replica shown, pause, search, wrapping and download, and how
 * the stream stands.
 */
export function LogToolbar(props: {
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
  /** Search the whole log on the server for the query (Enter in the search box). */
  onSearchAll: () => void;
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
          placeholder="Search (Enter: the whole log)"
          aria-label="Search the log"
          title="Shows the lines held that match; Enter searches the whole log on the server"
          value={query}
          onChange={event => props.onQuery(event.target.value)}
          onKeyDown={event => {
            if (event.key === 'Enter') {
              props.onSearchAll();
            }
          }}
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
      {describe(status, held.cut)}
      {props.searching
        ? ` · ${props.count} matching`
        : ` · ${props.count} lines`}
      {held.first > 0
        ? ` (${held.first} earlier not kept: download for all)`
        : held.begins.at
          ? ' (from a search’s hit)'
          : held.cut
            ? ' (from its last lines: Enter searches the whole log)'
            : ''}
    </span>
  );
}

function describe(status: Status, cut: boolean): string {
  switch (status.state) {
    case 'ended':
      return (
        (status.phase ? `Job ${status.phase}` : 'Run ended') +
        (cut ? '' : '; all lines shown')
      );
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
