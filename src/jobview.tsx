import { ReactWidget } from '@jupyterlab/apputils';
import { Poll } from '@lumino/polling';
import * as React from 'react';

import {
  isGone,
  Job,
  JobSummary,
  jobsAPI,
  ReplicaMetrics,
  Scalars,
  serverAPI,
  Trials
} from './api';
import { ScalarChart } from './charts';
import { age, bytes, FINISHED, until, why } from './format';
import { JobActions, PhaseBadge } from './components';
import { Provenance } from './provenance';
import { SweepTrials } from './sweep';

export interface IJobViewActions {
  openLogs: (name: string, replica?: string) => void;
  openTensorBoard: (name: string, replica: string) => void;
  onClone: (job: JobSummary) => void;
  /** Open the form that fine-tunes a sweep's best trial. */
  onFinetune: (sweep: string) => void;
  openJob: (name: string) => void;
  onDeleted: () => void;
}

/**
 * One job: its phase, replicas (with exit code, reason, where they run and what
 * they use), events, and the ways to its logs and TensorBoards; a sweep's
 * trials in place of replicas.
 */
export function JobView(
  props: { name: string; interval: number } & IJobViewActions
): JSX.Element {
  const [job, setJob] = React.useState<Job | null>(null);
  const [metrics, setMetrics] = React.useState<ReplicaMetrics[]>([]);
  const [scalars, setScalars] = React.useState<Scalars | null>(null);
  const [trials, setTrials] = React.useState<Trials | null>(null);
  const tag = React.useRef<string>();
  const [error, setError] = React.useState('');
  const poll = React.useRef<Poll>();

  React.useEffect(() => {
    const refresh = async () => {
      try {
        const fresh = await jobsAPI.get(props.name);
        const sweep = Boolean(fresh.spec.sweep);
        const [used, logged, tried] = await Promise.all([
          serverAPI.metrics(props.name),
          // none while its TensorBoard (Kubernetes) cannot answer
          sweep
            ? null
            : serverAPI.scalars(props.name, tag.current).catch(() => null),
          sweep ? serverAPI.trials(props.name) : null
        ]);
        setJob(fresh);
        setMetrics(used);
        setScalars(logged);
        setTrials(tried);
        setError('');
        // A finished job changes no more until a restart: check now and then.
        const interval = FINISHED.has(fresh.phase)
          ? 10 * props.interval
          : props.interval;
        current.frequency = { ...current.frequency, interval };
      } catch (reason) {
        if (isGone(reason)) {
          setError(`${props.name} no longer exists`);
          void current.stop();
        } else {
          setError((reason as Error).message);
        }
      }
    };
    const current = new Poll({
      factory: refresh,
      frequency: { interval: props.interval, backoff: false },
      standby: 'when-hidden',
      name: `jupyter-distrain:job:${props.name}`
    });
    poll.current = current;
    return () => current.dispose();
  }, [props.name, props.interval]);

  if (!job) {
    return <div className="jp-distrain-job-view">{error || 'Loading…'}</div>;
  }
  const use = new Map(metrics.map(m => [m.replica, m]));
  const tensorboard = job.spec.tensorboard?.enabled;
  const after = async () => {
    if (
      !(await jobsAPI.get(job.name).then(
        () => true,
        () => false
      ))
    ) {
      props.onDeleted();
    } else {
      await poll.current?.refresh();
    }
  };
  return (
    <div className="jp-distrain-job-view">
      <header className="jp-distrain-job-header">
        <h2>{job.name}</h2>
        <PhaseBadge phase={job.phase} />
        <span className="jp-distrain-job-reason">{why(job)}</span>
        <JobActions job={job} after={after} onClone={props.onClone} />
      </header>
      {error && <div className="jp-distrain-error">{error}</div>}
      {job.supervision && (
        <div className="jp-distrain-warning jp-distrain-supervision">
          This job is {job.supervision}.
        </div>
      )}
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
        <dt>Run</dt>
        <dd>{job.run}</dd>
        <dt>Created</dt>
        <dd title={job.created}>{age(job.created)} ago</dd>
        <dt>Exit code</dt>
        <dd>{job.exit_code ?? '–'}</dd>
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
      <div className="jp-distrain-job-links">
        <button
          className="jp-Button jp-mod-styled jp-mod-accept"
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
      </div>
      {trials && (
        <SweepTrials
          trials={trials}
          openJob={props.openJob}
          onFinetune={() => props.onFinetune(job.name)}
        />
      )}
      {!trials && (
        <>
          <h3>Replicas</h3>
          <div className="jp-distrain-table-scroll">
            <table className="jp-distrain-table jp-distrain-replicas">
              <thead>
                <tr>
                  <th>Replica</th>
                  <th>Phase</th>
                  <th>Exit code</th>
                  <th>Reason</th>
                  <th></th>
                  <th>Node</th>
                  <th>Restarts</th>
                  <th>Started</th>
                  <th>Finished</th>
                  <th>CPU</th>
                  <th>Memory</th>
                  <th>GPU</th>
                </tr>
              </thead>
              <tbody>
                {job.replicas.map(replica => {
                  const used = use.get(replica.name);
                  return (
                    <tr key={replica.name} data-replica={replica.name}>
                      <td>{replica.name}</td>
                      <td>
                        <PhaseBadge phase={replica.phase} />
                      </td>
                      <td>{replica.exit_code ?? ''}</td>
                      <td className="jp-distrain-reason">{replica.reason}</td>
                      <td className="jp-distrain-row-links">
                        <button
                          className="jp-Button jp-mod-minimal"
                          onClick={() => props.openLogs(job.name, replica.name)}
                        >
                          Logs
                        </button>
                        {tensorboard && (
                          <button
                            className="jp-Button jp-mod-minimal"
                            onClick={() =>
                              props.openTensorBoard(job.name, replica.name)
                            }
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
                      <td>
                        {typeof used?.cpu_percent === 'number'
                          ? `${used.cpu_percent.toFixed(0)}%`
                          : ''}
                      </td>
                      <td>
                        {typeof used?.memory_bytes === 'number'
                          ? bytes(used.memory_bytes)
                          : ''}
                      </td>
                      <td>
                        {typeof used?.gpu_utilization === 'number'
                          ? `${used.gpu_utilization.toFixed(0)}%, ${used.gpu_memory_mib?.toFixed(0)} MiB`
                          : ''}
                      </td>
                    </tr>
                  );
                })}
              </tbody>
            </table>
          </div>
        </>
      )}
      {scalars && (
        <ScalarChart
          scalars={scalars}
          onTag={name => {
            tag.current = name;
            void poll.current?.refresh();
          }}
        />
      )}
      <Provenance job={job} openJob={props.openJob} />
      <h3>Events</h3>
      <div className="jp-distrain-table-scroll">
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
            {(job.events ?? []).map((event, index) => (
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
      </div>
    </div>
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
    this.title.label = job;
    this.title.caption = `Training job ${job}`;
  }

  render(): JSX.Element {
    return <JobView name={this.job} {...this.options} />;
  }
}
