import { ReactWidget } from '@jupyterlab/apputils';
import * as React from 'react';

import { serverAPI, UsageReport, UsageTotal, UsedRun } from './api';
import { Head, PhaseBadge } from './components';
import { timeLeft } from './format';

/** The periods the view offers, as the usage endpoint's `since` ('' for this month). */
const PERIODS: [string, string][] = [
  ['', 'This month'],
  ['7d', 'The last 7 days'],
  ['30d', 'The last 30 days'],
  ['365d', 'The last year']
];

/**
 * What runs used, deleted jobs' included: each owner's sums beside their
 * budget, each sweep's, and each run, with their cost at the admin's prices.
 */
export function UsageView(): JSX.Element {
  const [since, setSince] = React.useState('');
  const [report, setReport] = React.useState<UsageReport | null>(null);
  const [error, setError] = React.useState('');
  React.useEffect(() => {
    setReport(null);
    serverAPI.usage(since || undefined).then(
      found => {
        setReport(found);
        setError('');
      },
      (reason: Error) => setError(`Could not read the usage: ${reason.message}`)
    );
  }, [since]);
  const currency = report?.currency ? ` (${report.currency})` : '';
  return (
    <div className="jp-distrain-usage-report">
      <h2>Usage</h2>
      <label>
        Since{' '}
        <select value={since} onChange={event => setSince(event.target.value)}>
          {PERIODS.map(([value, label]) => (
            <option key={value} value={value}>
              {label}
            </option>
          ))}
        </select>
      </label>
      {!report ? (
        <p>{error || 'Loading…'}</p>
      ) : report.runs.length === 0 ? (
        <p>No runs since {report.since}.</p>
      ) : (
        <>
          <Totals
            caption="By owner"
            first="Owner"
            rows={report.owners}
            name={total => total.owner || 'no owner'}
            currency={currency}
          />
          {report.sweeps.length > 0 && (
            <Totals
              caption="By sweep"
              first="Sweep"
              rows={report.sweeps}
              name={total => total.sweep ?? ''}
              currency={currency}
            />
          )}
          <table className="jp-distrain-table jp-distrain-usage-runs">
            <caption>Runs</caption>
            <Head
              columns={[
                'Job',
                'Run',
                'Owner',
                'Phase',
                'Started',
                'Ran',
                'GPU-hours',
                'CPU-hours',
                `Cost${currency}`
              ]}
            />
            <tbody>
              {report.runs.map(run => (
                <Run key={`${run.job}.${run.created}.${run.run}`} run={run} />
              ))}
            </tbody>
          </table>
        </>
      )}
    </div>
  );
}

function Totals(props: {
  caption: string;
  first: string;
  rows: UsageTotal[];
  name: (total: UsageTotal) => string;
  currency: string;
}): JSX.Element {
  const budgets = props.rows.some(total => total.budget);
  return (
    <table className="jp-distrain-table jp-distrain-usage-totals">
      <caption>{props.caption}</caption>
      <Head
        columns={[
          props.first,
          'Runs',
          'GPU-hours',
          'CPU-hours',
          `Cost${props.currency}`,
          ...(budgets ? ['Budget this month'] : [])
        ]}
      />
      <tbody>
        {props.rows.map(total => (
          <tr key={props.name(total)}>
            <th scope="row">{props.name(total)}</th>
            <td>{total.runs}</td>
            <td>{hours(total.gpu_hours)}</td>
            <td>{hours(total.cpu_hours)}</td>
            <td>{money(total.cost)}</td>
            {budgets && (
              <td>
                {total.budget
                  ? `${hours(total.budget.left)} of ${total.budget.gpu_hours} GPU-hours left`
                  : '–'}
              </td>
            )}
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function Run(props: { run: UsedRun }): JSX.Element {
  const { run } = props;
  return (
    <tr>
      <th scope="row">{run.job}</th>
      <td>{run.run}</td>
      <td>{run.owner || 'no owner'}</td>
      <td>
        <PhaseBadge phase={run.phase} />
      </td>
      <td>{run.started ? new Date(run.started).toLocaleString() : '–'}</td>
      <td>{run.wall_seconds === null ? '–' : timeLeft(run.wall_seconds)}</td>
      <td>{hours(run.gpu_hours)}</td>
      <td title={run.cpu_measured ? 'Measured' : 'As requested'}>
        {hours(run.cpu_hours)}
      </td>
      <td>{money(run.cost)}</td>
    </tr>
  );
}

/** Hours to three significant digits; '–' where not known. */
function hours(value: number | null): string {
  return value === null ? '–' : String(Number(value.toPrecision(3)));
}

function money(value: number | null): string {
  return value === null ? '–' : value.toFixed(2);
}

/** The usage report, as a tab's content. */
export class UsageWidget extends ReactWidget {
  constructor() {
    super();
    this.addClass('jp-distrain-usage-report-widget');
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', 'Usage');
  }

  render(): JSX.Element {
    return <UsageView />;
  }
}
