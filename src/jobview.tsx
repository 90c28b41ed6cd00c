import { ReactWidget } from '@jupyterlab/apputils';
import * as React from 'react';

import {
  isGone,
  Job,
  JobEvent,
  JobSummary,
  jobsAPI,
  Replica,
  ReplicaMetrics,
  Scalars,
  serverAPI,
  Trials,
  Waiting
} from './api';
import { ScalarChart } from './charts';
import { Action, JobActions, PhaseBadge, ScrollingTable } from './components';
import {
  age,
  bytes,
  FINISHED,
  progressText,
  until,
  usedText,
  why
} from './format';
import { LogView } from './logs';
import { usePoll } from './polling';
import { Provenance } from './provenance';
import { StacksView } from './stacks';
import { SweepTrials } from './sweep';
import { followTrials } from './trials';

export interface IJobViewActions {
  openLogs: (name: string, replica?: string) => void;
  openTensorBoard: (name: string, replica: string) => void;
  onClone: (job: JobSummary) => void;
  /** Open the form that fine-tunes a sweep's best trial. */
  onFinetune: (sweep: string) => void;
  openJob: (name: string) => void;
  /** Show the job beside another, asked for. */
  onCompare: (name: string) => void;
  onDeleted: () => void;
}

/** What the job view shows of a job, refreshed as it changes. */
interface IJobDetails {
  job: Job | null;
  /** What each replica uses now. */
  metrics: ReplicaMetrics[];
  /** One tag of what the job logs to its event files; none for a sweep. */
  scalars: Scalars | null;
  /** A sweep's trials; none for another job. */
  trials: Trials | null;
  /** Why the last refresh failed; '' when it did not. */
  error: string;
}

/** A sweep's table, asked for what changed since `held` (the whole at first). */
async function followedTrials(
  sweep: string,
  held: Trials | null
): Promise<Trials> {
  const since = held?.name === sweep ? (held.version ?? '') : '';
  const table = followTrials(held, await serverAPI.trials(sweep, since));
  return (
    table ?? (followTrials(null, await serverAPI.trials(sweep, '')) as Trials)
  );
}

/**
 * A job's details, polled every `interval` milliseconds (a finished job's ten
 * times less often) until it no longer exists; `chooseTag` picks the scalars'
 * tag, `refresh` polls at once.
 */
function useJobDetails(
  name: string,
  interval: number
): IJobDetails & {
  refresh: () => Promise<void>;
  chooseTag: (tag: string) => void;
} {
  const [details, setDetails] = React.useState<IJobDetails>({
    job: null,
    metrics: [],
    scalars: null,
    trials: null,
    error: ''
  });
  const tag = React.useRef<string>();
  const trials = React.useRef<Trials | null>(null); // a sweep's, as last shown
  const refresh = usePoll(
    `jupyter-distrain:job:${name}`,
    interval,
    async poll => {
      try {
        const job = await jobsAPI.get(name);
        // shown at once: what it uses and logged follows
        setDetails(current => ({ ...current, job, error: '' }));
        const sweep = Boolean(job.spec.sweep);
        const [metrics, scalars, table] = await Promise.all([
          serverAPI.metrics(name),
          // none while its TensorBoard (Kubernetes) cannot answer
          sweep ? null : serverAPI.scalars(name, tag.current).catch(() => null),
          sweep ? followedTrials(name, trials.current) : null
        ]);
        trials.current = table;
        setDetails({ job, metrics, scalars, trials: table, error: '' });
        // A finished job changes no more until a restart: check now and then.
        poll.frequency = {
          ...poll.frequency,
          interval: FINISHED.has(job.phase) ? 10 * interval : interval
        };
      } catch (reason) {
        const gone = isGone(reason);
        setDetails(current => ({
          ...current,
          error: gone ? `${name} no longer exists` : (reason as Error).message
        }));
        if (gone) {
          void poll.stop();
        }
      }
    }
  );
  const chooseTag = (chosen: string) => {
    tag.current = chosen;
    void refresh();
  };
  return { ...details, refresh, chooseTag };
}

/**
 * One job: its phase, replicas (with exit code, reason, where they run and what
 * they use), events, and the ways to its logs and TensorBoards; a sweep's
 * trials in place of replicas.
 */
export function JobView(
  props: { name: string; interval: number } & IJobViewActions
): JSX.Element {
  const { job, metrics, scalars, trials, error, refresh, chooseTag } =
    useJobDetails(props.name, props.interval);
  const [showStacks, setShowStacks] = React.useState(false);
  const [showKept, setShowKept] = React.useState(false);
  if (!job) {
    return <div className="jp-distrain-job-view">{error || 'Loading…'}</div>;
  }
  const tensorboard = Boolean(job.spec.tensorboard?.enabled);
  const hung = (job.events ?? []).some(event => event.reason === 'NoProgress');
  // After an action: the tab closes with the deleted job, else shows it as it is now.
  const after = async (done: Action | null) => {
    if (done === 'delete') {
      props.onDeleted();
    } else {
      await refresh();
    }
  };
  return (
    <div className="jp-distrain-job-view">
      <div className="jp-distrain-job-header">
        <h2>{job.name}</h2>
        <span role="status">
          <PhaseBadge phase={job.phase} />
        </span>
        <span className="jp-distrain-job-reason">{why(job)}</span>
        <JobActions job={job} after={after} onClone={props.onClone} />
      </div>
      {error && <div className="jp-distrain-error">{error}</div>}
      {job.hint && (
        <div className="jp-distrain-warning jp-distrain-hint">
          Hint: {job.hint}
        </div>
      )}
      {job.supervision && (
        <div className="jp-distrain-warning jp-distrain-supervision">
          This job is {job.supervision}.
        </div>
      )}
      {(job.phase === 'Pending' || job.phase === 'Queued') && (
        <WhyItWaits job={job} />
      )}
      <JobFacts job={job} />
      <div className="jp-distrain-job-links">
        <button
          className="jp-Button jp-mod-styled jp-mod-accept"
          title="The job's logs in a tab of their own"
          onClick={() => props.openLogs(job.name)}
        >
          Logs
        </button>
        {tensorboard && (
          <button
            className="jp-Button jp-mod-styled jp-mod-reject"
            onClick={() => props.openTensorBoard(job.name, 'all')}
          >
            TensorBoard (all {job.spec.sweep ? 'trials' : 'replicas'})
          </button>
        )}
        <button
          className="jp-Button jp-mod-styled jp-mod-reject"
          title="This job beside another: spec, code, packages, metrics"
          onClick={() => props.onCompare(job.name)}
        >
          Compare…
        </button>
        {job.phase === 'Running' && !job.spec.sweep && !showStacks && (
          <button
            className="jp-Button jp-mod-styled jp-mod-reject"
            title="Every replica's stacks, taken at once"
            onClick={() => setShowStacks(true)}
          >
            Where is it now?
          </button>
        )}
        {hung && !showKept && (
          <button
            className="jp-Button jp-mod-styled jp-mod-reject"
            title="The replicas' stacks, kept when the job stopped progressing"
            onClick={() => setShowKept(true)}
          >
            Stacks when it hung
          </button>
        )}
      </div>
      {job.spec.sweep ? (
        trials && (
          <SweepTrials
            trials={trials}
            openJob={props.openJob}
            onFinetune={() => props.onFinetune(job.name)}
          />
        )
      ) : (
        <ReplicaTable
          job={job}
          metrics={metrics}
          paces={scalars?.rates ?? {}}
          tensorboard={tensorboard}
          openLogs={props.openLogs}
          openTensorBoard={props.openTensorBoard}
        />
      )}
      {showStacks && (
        <StacksView name={job.name} onClose={() => setShowStacks(false)} />
      )}
      {showKept && (
        <StacksView name={job.name} kept onClose={() => setShowKept(false)} />
      )}
      <JobLogs name={job.name} />
      {scalars && <ScalarChart scalars={scalars} onTag={chooseTag} />}
      <Provenance job={job} openJob={props.openJob} />
      <EventTable events={job.events ?? []} />
    </div>
  );
}

/**
 * Why a Pending or Queued job waits: the server's sentence, and the numbers
 * behind it (what each replica no node can take asks for against the most free
 * on a node; its place in its queue). Asked again as the job's state changes.
 */
function WhyItWaits(props: { job: Job }): JSX.Element | null {
  const { name, phase, reason, message } = props.job;
  const [found, setFound] = React.useState<Waiting>();
  React.useEffect(() => {
    let current = true;
    serverAPI
      .waiting(name)
      .then(answer => current && setFound(answer))
      .catch(() => current && setFound(undefined));
    return () => {
      current = false;
    };
  }, [name, phase, reason, message]);
  if (!found?.waiting) {
    return null;
  }
  const rows = found.replicas.flatMap(replica =>
    replica.resources.map(row => ({ replica: replica.name, ...row }))
  );
  return (
    <section className="jp-distrain-waiting" aria-label="Why it waits">
      <div>{found.sentence}</div>
      {rows.length > 0 && (
        <table>
          <thead>
            <tr>
              <th>Replica</th>
              <th>Asks for</th>
              <th>Most free on a node</th>
              <th>Largest node</th>
            </tr>
          </thead>
          <tbody>
            {rows.map(row => (
              <tr key={row.replica + row.resource}>
                <td>{row.replica}</td>
                <td>{amount(row.resource, row.requested)}</td>
                <td>
                  {amount(row.resource, row.largest_free)}
                  {row.node ? ` (${row.node})` : ''}
                </td>
                <td>{amount(row.resource, row.largest_allocatable)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

/** An amount of a resource as the job spec names it: 2 GPUs, 1.5 CPUs, 16.0 GiB. */
function amount(resource: string, value: number): string {
  if (resource === 'memory') {
    return bytes(value);
  }
  const unit = resource === 'gpus' ? 'GPU' : 'CPU';
  return `${value} ${unit}${value === 1 ? '' : 's'}`;
}

/**
 * The job's live log, in the job's own tab (its Logs button opens it in a tab
 * of its own, taller).
 */
function JobLogs(props: { name: string }): JSX.Element {
  const [replica, setReplica] = React.useState('');
  const [run, setRun] = React.useState<number>();
  return (
    <section className="jp-distrain-job-logs" aria-label="Logs">
      <h3>Logs</h3>
      <LogView
        name={props.name}
        replica={replica}
        run={run}
        onReplica={setReplica}
        onRun={setRun}
      />
    </section>
  );
}

/**
 * Where the job runs, its run, age, exit code and output, how long it is kept,
 * and its hyperparameters.
 */
function JobFacts(props: { job: Job }): JSX.Element {
  const { job } = props;
  return (
    <dl className="jp-distrain-job-facts">
      <dt>Backend</dt>
      <dd>
        {job.engine ? `${job.backend} (engine: ${job.engine})` : job.backend}
      </dd>
      {job.spec.queue && (
        <>
          <dt>Queue</dt>
          <dd>{job.spec.queue}</dd>
        </>
      )}
      {job.progress && (
        <>
          <dt>Progress</dt>
          <dd className="jp-distrain-progress">{progressText(job.progress)}</dd>
        </>
      )}
      <dt>Run</dt>
      <dd>{job.run}</dd>
      <dt>Created</dt>
      <dd title={job.created}>{age(job.created)} ago</dd>
      <dt>Exit code</dt>
      <dd>{job.exit_code ?? '–'}</dd>
      {job.usage && job.usage.wall_seconds !== null && (
        <>
          <dt>Used</dt>
          <dd className="jp-distrain-usage">{usedText(job.usage)}</dd>
        </>
      )}
      <dt>Output</dt>
      <dd className="jp-distrain-mono">{job.output_dir}</dd>
      {(job.expires || job.spec.policy?.ttl_after_finished) && (
        <>
          <dt>Kept</dt>
          <dd className="jp-distrain-expires" title={job.expires ?? ''}>
            {job.expires
              ? `until ${new Date(job.expires).toLocaleString()} (in ${until(job.expires)}), then deleted with its logs; the output stays`
              : `${job.spec.policy?.ttl_after_finished} once finished, then deleted with its logs; the output stays`}
          </dd>
        </>
      )}
      <dt>Hyperparameters</dt>
      <dd className="jp-distrain-mono jp-distrain-hyperparameter-values">
        {Object.entries(job.spec.hyperparameters ?? {})
          .map(([key, value]) => `${key} = ${JSON.stringify(value)}`)
          .join(', ') || '–'}
      </dd>
    </dl>
  );
}

type ReplicaLinks = Pick<IJobViewActions, 'openLogs' | 'openTensorBoard'> & {
  /** Whether the job runs TensorBoard, so each replica has one to open. */
  tensorboard: boolean;
};

/**
 * The job's replicas, a row each: phase, exit, links to its logs and
 * TensorBoard, node, restarts, times, pace (steps per second, from its event
 * files) and what it uses.
 */
function ReplicaTable(
  props: {
    job: Job;
    metrics: ReplicaMetrics[];
    paces: Record<string, number>;
  } & ReplicaLinks
): JSX.Element {
  const { job, paces, ...links } = props;
  const use = new Map(props.metrics.map(m => [m.replica, m]));
  return (
    <>
      <h3>Replicas</h3>
      <ScrollingTable label="Replicas">
        <table className="jp-distrain-table jp-distrain-replicas">
          <thead>
            <tr>
              <th>Replica</th>
              <th>Phase</th>
              <th>Exit code</th>
              <th>Reason</th>
              <th>Open</th>
              <th>Node</th>
              <th>Restarts</th>
              <th>Started</th>
              <th>Finished</th>
              <th>Steps/s</th>
              <th>Progress</th>
              <th>CPU</th>
              <th>Memory</th>
              <th>GPU</th>
            </tr>
          </thead>
          <tbody>
            {job.replicas.map(replica => (
              <ReplicaRow
                key={replica.name}
                job={job.name}
                replica={replica}
                used={use.get(replica.name)}
                pace={paces[replica.name]}
                {...links}
              />
            ))}
          </tbody>
        </table>
      </ScrollingTable>
    </>
  );
}

function ReplicaRow(
  props: {
    job: string;
    replica: Replica;
    used?: ReplicaMetrics;
    pace?: number;
  } & ReplicaLinks
): JSX.Element {
  const { job, replica, used, pace } = props;
  return (
    <tr data-replica={replica.name}>
      <td>{replica.name}</td>
      <td>
        <PhaseBadge phase={replica.phase} />
      </td>
      <td>{replica.exit_code ?? ''}</td>
      <td className="jp-distrain-reason">{replica.reason}</td>
      <td className="jp-distrain-row-links">
        <button
          className="jp-Button jp-mod-minimal"
          onClick={() => props.openLogs(job, replica.name)}
        >
          Logs
        </button>
        {props.tensorboard && (
          <button
            className="jp-Button jp-mod-minimal"
            onClick={() => props.openTensorBoard(job, replica.name)}
          >
            TensorBoard
          </button>
        )}
      </td>
      <td
        className="jp-distrain-mono jp-distrain-node"
        title={replica.address ?? ''}
      >
        {replica.node ?? ''}
      </td>
      <td>{replica.restarts}</td>
      <td title={replica.started ?? ''}>
        {replica.started ? `${age(replica.started)} ago` : ''}
      </td>
      <td title={replica.finished ?? ''}>
        {replica.finished ? `${age(replica.finished)} ago` : ''}
      </td>
      <td className="jp-distrain-pace">
        {pace === undefined ? '' : pace.toPrecision(3)}
      </td>
      <td className="jp-distrain-progress">{progressText(replica.progress)}</td>
      <td title={used?.unknown ?? ''}>
        {typeof used?.cpu_percent === 'number'
          ? `${used.cpu_percent.toFixed(0)}%`
          : used?.unknown
            ? 'unknown'
            : ''}
      </td>
      <td title={used?.unknown ?? ''}>
        {typeof used?.memory_bytes === 'number'
          ? bytes(used.memory_bytes)
          : used?.unknown
            ? 'unknown'
            : ''}
      </td>
      <td>
        {typeof used?.gpu_utilization === 'number'
          ? `${used.gpu_utilization.toFixed(0)}%, ${used.gpu_memory_mib?.toFixed(0)} MiB`
          : ''}
      </td>
    </tr>
  );
}

/** The job's events, a row each, oldest first. */
function EventTable(props: { events: JobEvent[] }): JSX.Element {
  return (
    <>
      <h3>Events</h3>
      <ScrollingTable label="Events">
        <table className="jp-distrain-table jp-distrain-events">
          <thead>
            <tr>
              <th>Time</th>
              <th>Type</th>
              <th>Replica</th>
              <th>Reason</th>
              <th>Message</th>
            </tr>
          </thead>
          <tbody>
            {props.events.map((event, index) => (
              <tr
                key={index}
                className={`jp-distrain-event-${event.type.toLowerCase()}`}
              >
                <td title={event.time}>
                  {new Date(event.time).toLocaleTimeString()}
                </td>
                <td>{event.type}</td>
                <td>{event.replica}</td>
                <td>{event.reason}</td>
                <td>{event.message}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </ScrollingTable>
    </>
  );
}

/**
 * A job's view as a main-area tab.
 */
export class JobViewWidget extends ReactWidget {
  constructor(
    readonly job: string,
    private readonly options: { interval: number } & IJobViewActions
  ) {
    super();
    this.addClass('jp-distrain-job-view-widget');
    // focused when its tab is activated, as after a submit: Tab goes on to its buttons
    this.node.tabIndex = -1;
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', `Training job ${job}`);
    this.title.label = job;
    this.title.caption = `Training job ${job}`;
  }

  render(): JSX.Element {
    return <JobView name={this.job} {...this.options} />;
  }
}
