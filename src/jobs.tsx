import { ReactWidget, UseSignal } from '@jupyterlab/apputils';
import { addIcon } from '@jupyterlab/ui-components';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';
import { useVirtualizer } from '@tanstack/react-virtual';
import * as React from 'react';

import { JobChanges, JobSummary, jobsAPI, Scalars, serverAPI } from './api';
import { Sparkline } from './charts';
import { JobActions, PhaseBadge } from './components';
import { age, FINISHED, matches, progressText, ready, why } from './format';
import { browserAllows, newsOf, tell } from './notify';

/**
 * The jobs, refreshed by a poll that stands by while the page is hidden (unless
 * the browser may notify); tells their owner of their ends, hangs and
 * stragglers (see notify.ts).
 */
export class JobsModel {
  constructor(interval: number) {
    this.poll = new Poll({
      factory: () => this.refresh(),
      frequency: { interval, backoff: true, max: 30 * 1000 },
      standby: () => document.hidden && !this.notifiesInBrowser,
      name: 'jupyter-distrain:jobs'
    });
  }

  /** Whether news comes through the browser too while the page is hidden (a setting). */
  browserNotifications = true;

  private get notifiesInBrowser(): boolean {
    return this.browserNotifications && browserAllows();
  }

  get jobs(): readonly JobSummary[] {
    return this._jobs;
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** How often to refresh, in milliseconds. */
  set interval(interval: number) {
    this.poll.frequency = { ...this.poll.frequency, interval };
  }

  /** Each job's main scalar (its loss), for the list's sparklines. */
  get scalars(): ReadonlyMap<string, Scalars> {
    return this._scalars;
  }

  /**
   * Show the jobs (and tell of what changed in them) at once; their scalars are
   * read afterwards, so a slow TensorBoard delays neither the list nor the next
   * refresh. One refresh at a time (a refresh asked during one follows it):
   * each asks for the changes since the version the one before brought.
   */
  refresh(): Promise<void> {
    const after = () => this._refresh();
    this._refreshing = this._refreshing.then(after, after);
    return this._refreshing;
  }

  private async _refresh(): Promise<void> {
    const changes = await jobsAPI.changes(this._version);
    this._version = changes.version;
    if (changes.complete || changes.jobs.length || changes.removed.length) {
      const before = new Map(this._jobs.map(job => [job.name, job]));
      for (const job of changes.jobs) {
        const news = newsOf(before.get(job.name), job);
        if (news) {
          tell(news, this.browserNotifications);
        }
      }
      this._jobs = changes.complete
        ? changes.jobs
        : withChanges(this._jobs, changes);
      this.forgetScalars(this._jobs);
      this._changed.emit();
    }
    this.readScalars(this._jobs);
  }

  /**
   * Read the scalars of the running jobs, and of each finished one once (they
   * change no more): at most SCALAR_READS a refresh, the running first, none of
   * a job whose last read has not answered yet, and READS_AT_ONCE at a time, the
   * others queued until the next refresh replaces the queue. Each shows as it
   * comes.
   */
  private readScalars(jobs: JobSummary[]): void {
    this._due = jobs
      .filter(
        job =>
          !this._reading.has(job.name) &&
          this._scalarsRead.get(job.name) !== job.finished
      )
      .sort(
        (a, b) => Number(FINISHED.has(a.phase)) - Number(FINISHED.has(b.phase))
      )
      .slice(0, SCALAR_READS);
    while (this._reading.size < READS_AT_ONCE && this._due.length) {
      this.readScalarsOf(this._due.shift()!);
    }
  }

  /** Read one job's scalars, then the next due job's. */
  private readScalarsOf(job: JobSummary): void {
    this._reading.add(job.name);
    void serverAPI
      .scalars(job.name)
      .catch(() => null)
      .then(found => {
        this._reading.delete(job.name);
        // unless it was deleted meanwhile
        if (this._jobs.some(listed => listed.name === job.name)) {
          this._scalars.delete(job.name);
          if (found?.tag && Object.keys(found.runs).length) {
            this._scalars.set(job.name, found);
          }
          // a running job's until it finishes (undefined never matches a finish time)
          this._scalarsRead.set(job.name, job.finished ?? undefined);
          this._changed.emit();
        }
        const next = this._due.shift();
        if (next) {
          this.readScalarsOf(next);
        }
      });
  }

  /** Drop the scalars of the jobs no longer listed. */
  private forgetScalars(jobs: JobSummary[]): void {
    const names = new Set(jobs.map(job => job.name));
    for (const name of [...this._scalars.keys(), ...this._scalarsRead.keys()]) {
      if (!names.has(name)) {
        this._scalars.delete(name);
        this._scalarsRead.delete(name);
      }
    }
  }

  dispose(): void {
    this.poll.dispose();
  }

  readonly poll: Poll;
  private _jobs: JobSummary[] = [];
  /** The version of the list held (the server's last answer's). */
  private _version = '';
  private _refreshing: Promise<void> = Promise.resolve();
  private _scalars = new Map<string, Scalars>();
  /** When a job's scalars were last read: its finish time then, undefined while it ran. */
  private _scalarsRead = new Map<string, string | null | undefined>();
  /** The jobs whose scalars are being read. */
  private _reading = new Set<string>();
  /** The jobs whose scalars are read next. */
  private _due: JobSummary[] = [];
  private _changed = new Signal<this, void>(this);
}

/**
 * The list `held` with `changes` made: the removed jobs gone, the changed ones
 * replaced, the new ones added, oldest first (a name made again is newer).
 */
function withChanges(held: JobSummary[], changes: JobChanges): JobSummary[] {
  const changed = new Map(changes.jobs.map(job => [job.name, job]));
  const removed = new Set(changes.removed);
  const jobs = held.filter(
    job => !removed.has(job.name) && !changed.has(job.name)
  );
  jobs.push(...changed.values());
  // two sorted runs, which the browser's sort (a TimSort) merges in one pass
  return jobs.sort((a, b) =>
    a.created < b.created ? -1 : a.created > b.created ? 1 : 0
  );
}

const SCALAR_READS = 20;
/**
 * The browser opens at most six connections to the server, which the list, the
 * open tabs and the rest of JupyterLab share: slow scalars take no more than
 * this many.
 */
const READS_AT_ONCE = 3;

/** Phases in which the list says why the job is there: what failed, what it waits for. */
const EXPLAINED = new Set(['Failed', 'Pending', 'Queued']);

/** A row of the list: a job, or a trial of the unfolded sweep above it. */
interface ListRow {
  job: JobSummary;
  trials: JobSummary[];
  isTrial: boolean;
}

/**
 * The list's rows: each job that is not a shown sweep's trial, the trials of
 * each unfolded sweep under it. Linear in the jobs (a sweep's trials are found
 * by one pass), for lists of tens of thousands.
 */
function listRows(
  shown: readonly JobSummary[],
  unfolded: ReadonlySet<string>
): ListRow[] {
  const names = new Set(shown.map(job => job.name));
  const sweepOf = (job: JobSummary) =>
    job.trial_of && names.has(job.trial_of) ? job.trial_of : undefined;
  const trialsOf = new Map<string, JobSummary[]>();
  for (const job of shown) {
    const sweep = sweepOf(job);
    if (sweep) {
      const trials = trialsOf.get(sweep) ?? [];
      trials.push(job);
      trialsOf.set(sweep, trials);
    }
  }
  const rows: ListRow[] = [];
  for (const job of shown) {
    if (sweepOf(job)) {
      continue;
    }
    const trials = trialsOf.get(job.name) ?? [];
    rows.push({ job, trials, isTrial: false });
    if (unfolded.has(job.name)) {
      rows.push(
        ...trials.map(trial => ({ job: trial, trials: [], isTrial: true }))
      );
    }
  }
  return rows;
}

/** A row's height before it is drawn and measured (two lines and a border). */
const ROW_ESTIMATE = 48;

/**
 * The jobs list: a row per job, a sweep's trials folded under it. Windowed:
 * only the rows in view (and a few around) are in the page, however long the
 * list, each measured as drawn.
 */
export function JobList(props: {
  model: JobsModel;
  onOpen: (job: JobSummary) => void;
  onClone: (job: JobSummary) => void;
}): JSX.Element {
  const [filter, setFilter] = React.useState('');
  const [unfolded, setUnfolded] = React.useState<ReadonlySet<string>>(
    new Set()
  );
  const jobs = props.model.jobs;
  const rows = React.useMemo(
    () =>
      listRows(
        jobs.filter(job => matches(job, filter)),
        unfolded
      ),
    [jobs, filter, unfolded]
  );
  // An admin's server (c.Distrain.see_all_owners) lists everyone's jobs: say whose each is.
  const owners = React.useMemo(
    () => new Set(jobs.map(job => job.owner)).size > 1,
    [jobs]
  );
  const scroller = React.useRef<HTMLDivElement>(null);
  const windowed = useVirtualizer({
    count: rows.length,
    getScrollElement: () => scroller.current,
    estimateSize: () => ROW_ESTIMATE,
    getItemKey: index => rows[index].job.name,
    overscan: 6
  });
  const fold = React.useCallback(
    (name: string) =>
      setUnfolded(before => {
        const next = new Set(before);
        if (!next.delete(name)) {
          next.add(name);
        }
        return next;
      }),
    []
  );
  return (
    <div className="jp-distrain-jobs">
      <input
        className="jp-distrain-filter jp-mod-styled"
        type="search"
        placeholder="Filter jobs"
        aria-label="Filter jobs"
        value={filter}
        onChange={event => setFilter(event.target.value)}
      />
      {rows.length === 0 ? (
        <p className="jp-distrain-empty">
          {jobs.length ? 'No job matches.' : 'No training jobs yet.'}
        </p>
      ) : (
        <div className="jp-distrain-scroller" ref={scroller}>
          <ul
            className="jp-distrain-list"
            aria-label="Training jobs"
            style={{ height: windowed.getTotalSize() }}
          >
            {windowed.getVirtualItems().map(item => {
              const row = rows[item.index];
              return (
                <JobRow
                  key={item.key}
                  index={item.index}
                  measure={windowed.measureElement}
                  top={item.start}
                  job={row.job}
                  trials={row.trials}
                  isTrial={row.isTrial}
                  unfolded={unfolded.has(row.job.name)}
                  onFold={fold}
                  owners={owners}
                  scalars={props.model.scalars.get(row.job.name)}
                  model={props.model}
                  onOpen={props.onOpen}
                  onClone={props.onClone}
                />
              );
            })}
          </ul>
        </div>
      )}
    </div>
  );
}

/**
 * One job: name, age; phase badge, replicas ready/total, backend (owner, when
 * the list has several) and actions; why it failed or waits; its main scalar.
 * A sweep's row folds its trials, rows of their own under it.
 */
const JobRow = React.memo(
  (props: {
    index: number;
    measure: (row: HTMLElement | null) => void;
    top: number;
    job: JobSummary;
    trials: JobSummary[];
    isTrial: boolean;
    unfolded: boolean;
    onFold: (name: string) => void;
    owners: boolean;
    scalars: Scalars | undefined;
    model: JobsModel;
    onOpen: (job: JobSummary) => void;
    onClone: (job: JobSummary) => void;
  }): JSX.Element => {
    const { job, trials } = props;
    const reason = why(job);
    return (
      <li
        className={`jp-distrain-job${props.isTrial ? ' jp-distrain-trial' : ''}`}
        data-job={job.name}
        data-index={props.index}
        ref={props.measure}
        style={{ transform: `translateY(${props.top}px)` }}
      >
        <button
          className="jp-distrain-name"
          title={`Open ${job.name}`}
          onClick={() => props.onOpen(job)}
        >
          {job.name}
        </button>
        <span className="jp-distrain-age" title={`Created ${job.created}`}>
          {age(job.created)}
        </span>
        <PhaseBadge phase={job.phase} title={reason} />
        <span className="jp-distrain-ready" title="Replicas running / all">
          {ready(job)}
        </span>
        {job.progress && (
          <span className="jp-distrain-progress" title="Progress">
            {progressText(job.progress)}
          </span>
        )}
        <span className="jp-distrain-backend">{job.backend}</span>
        {props.owners && (
          <span className="jp-distrain-owner" title="Owner">
            {job.owner || 'no owner'}
          </span>
        )}
        <JobActions
          job={job}
          after={() => props.model.poll.refresh()}
          onClone={props.onClone}
        />
        {reason && EXPLAINED.has(job.phase) && (
          <span
            className={`jp-distrain-why jp-distrain-why-${job.phase.toLowerCase()}`}
            title={reason}
          >
            {reason}
          </span>
        )}
        <Sparkline scalars={props.scalars} />
        {trials.length > 0 && (
          <button
            className="jp-distrain-trials-toggle"
            aria-expanded={props.unfolded}
            onClick={() => props.onFold(job.name)}
          >
            {trials.length} trial{trials.length > 1 ? 's' : ''}:{' '}
            {trialPhases(trials)}
          </button>
        )}
      </li>
    );
  }
);

/** How many of a sweep's trials are in each phase: "2 Running, 3 Succeeded". */
function trialPhases(trials: JobSummary[]): string {
  const counts = new Map<string, number>();
  for (const trial of trials) {
    counts.set(trial.phase, (counts.get(trial.phase) ?? 0) + 1);
  }
  return [...counts].map(([phase, count]) => `${count} ${phase}`).join(', ');
}

/**
 * The sidebar's "New job" button: a plain button (JupyterLab's toolbar button
 * says whether it is pressed, which a button that toggles nothing must not).
 */
export function newJobButton(onClick: () => void): Widget {
  return ReactWidget.create(
    <button
      className="jp-Button jp-mod-styled jp-mod-minimal jp-distrain-new-job"
      title="Train this notebook's repository"
      onClick={onClick}
    >
      <addIcon.react tag="span" elementSize="small" />
      New job
    </button>
  );
}

/**
 * The "Jobs" section of the sidebar.
 */
export class JobsWidget extends ReactWidget {
  constructor(
    readonly model: JobsModel,
    private readonly onOpen: (job: JobSummary) => void,
    private readonly onClone: (job: JobSummary) => void
  ) {
    super();
    this.addClass('jp-distrain-jobs-widget');
    this.title.label = 'Jobs';
  }

  render(): JSX.Element {
    return (
      <UseSignal signal={this.model.changed}>
        {() => (
          <JobList
            model={this.model}
            onOpen={this.onOpen}
            onClone={this.onClone}
          />
        )}
      </UseSignal>
    );
  }
}
