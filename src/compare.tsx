import { ReactWidget } from '@jupyterlab/apputils';
import * as React from 'react';

import { Comparison, Scalars, serverAPI } from './api';
import { ScalarChart } from './charts';
import { Head, PhaseBadge } from './components';
import { timeLeft } from './format';

type Side = Comparison['a'];

/**
 * Two jobs side by side: how each ended, their specs field by field with the
 * differences marked, the diff of their code, the packages and image that
 * differ, and their metrics on one chart per tag.
 */
export function CompareView(props: { a: string; b: string }): JSX.Element {
  const { a, b } = props;
  const [comparison, setComparison] = React.useState<Comparison | null>(null);
  const [error, setError] = React.useState('');
  const [scalars, setScalars] = React.useState<Scalars | null>(null);
  const [onlyDiffering, setOnlyDiffering] = React.useState(true);
  React.useEffect(() => {
    serverAPI.compare(a, b).then(setComparison, (reason: Error) => {
      setError(`Could not compare ${a} and ${b}: ${reason.message}`);
    });
    overlaid(a, b).then(setScalars, () => setScalars(null));
  }, [a, b]);
  if (!comparison) {
    return <div className="jp-distrain-compare">{error || 'Loading…'}</div>;
  }
  const fields = comparison.spec.filter(row => row.differs || !onlyDiffering);
  const differing = comparison.spec.filter(row => row.differs).length;
  return (
    <div className="jp-distrain-compare">
      <h2>
        {a} and {b}
      </h2>
      <table className="jp-distrain-table jp-distrain-compare-ends">
        <caption>How each ended</caption>
        <Head columns={['Job', 'Phase', 'Reason', 'Exit code', 'Ran']} />
        <tbody>
          {[comparison.a, comparison.b].map((side, i) => (
            <Ended key={i} side={side} />
          ))}
        </tbody>
      </table>
      <section className="jp-distrain-compare-spec">
        <h3>
          Spec: {differing} of {comparison.spec.length} fields differ
          <label>
            <input
              type="checkbox"
              checked={onlyDiffering}
              onChange={event => setOnlyDiffering(event.target.checked)}
            />
            Only the differences
          </label>
        </h3>
        <table className="jp-distrain-table">
          <Head columns={['Field', a, b, 'Differs']} />
          <tbody>
            {fields.map(row => (
              <tr
                key={row.field}
                className={row.differs ? 'jp-distrain-differs' : undefined}
              >
                <th scope="row" className="jp-distrain-mono">
                  {row.field}
                </th>
                <td className="jp-distrain-mono">{shown(row.a)}</td>
                <td className="jp-distrain-mono">{shown(row.b)}</td>
                <td>{row.differs ? 'differs' : ''}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </section>
      <CodeDiff code={comparison.code} />
      <Packages packages={comparison.packages} a={a} b={b} />
      {scalars && (
        <ScalarChart
          scalars={scalars}
          onTag={tag => void overlaid(a, b, tag).then(setScalars)}
        />
      )}
    </div>
  );
}

function Ended(props: { side: Side }): JSX.Element {
  const { side } = props;
  return (
    <tr>
      <th scope="row">
        {side.name} (run {side.run})
      </th>
      <td>
        <PhaseBadge phase={side.phase} />
      </td>
      <td>{side.reason || '–'}</td>
      <td>{side.exit_code ?? '–'}</td>
      <td>{side.seconds === null ? '–' : timeLeft(side.seconds)}</td>
    </tr>
  );
}

/** The files that differ between the two jobs' code, and the diff, its lines marked. */
function CodeDiff(props: { code: Comparison['code'] }): JSX.Element {
  const { files, diff, truncated, unknown } = props.code;
  return (
    <section className="jp-distrain-compare-code">
      <h3>Code: {unknown ?? counted(files.length, 'file')}</h3>
      {files.length > 0 && (
        <ul className="jp-distrain-mono">
          {files.map(file => (
            <li key={file.path}>
              {file.status} {file.path}
            </li>
          ))}
        </ul>
      )}
      {diff && (
        <pre
          className="jp-distrain-diff"
          tabIndex={0}
          aria-label="The diff of the two jobs' code"
        >
          {diff.split('\n').map((line, index) => (
            <span key={index} className={diffClass(line)}>
              {line + '\n'}
            </span>
          ))}
          {truncated && '[the diff is cut at 256 KiB]'}
        </pre>
      )}
    </section>
  );
}

function diffClass(line: string): string | undefined {
  if (line.startsWith('+++') || line.startsWith('---')) {
    return 'jp-distrain-diff-file';
  }
  return (
    { '+': 'jp-distrain-diff-added', '-': 'jp-distrain-diff-removed' }[
      line[0]
    ] ?? (line.startsWith('@@') ? 'jp-distrain-diff-hunk' : undefined)
  );
}

function Packages(props: {
  packages: Comparison['packages'];
  a: string;
  b: string;
}): JSX.Element {
  const { packages, a, b } = props;
  if (!packages?.length) {
    return <h3>Packages: {packages ? 'the same' : 'not known'}</h3>;
  }
  return (
    <section>
      <h3>Packages: {counted(packages.length, 'package')}</h3>
      <table className="jp-distrain-table">
        <Head columns={['Package', a, b]} />
        <tbody>
          {packages.map(found => (
            <tr key={found.name}>
              <th scope="row">{found.name}</th>
              <td>{found.a ?? 'not installed'}</td>
              <td>{found.b ?? 'not installed'}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

/** "the same", "1 file differs", "3 files differ". */
function counted(count: number, noun: string): string {
  if (count === 0) {
    return 'the same';
  }
  return count === 1 ? `1 ${noun} differs` : `${count} ${noun}s differ`;
}

/** A spec's value as the table shows it: JSON, '–' where the spec has none. */
function shown(value: unknown): string {
  return value === null || value === undefined ? '–' : JSON.stringify(value);
}

/** A side of the comparison (NAME, or NAME@RUN) as its job and run. */
function jobAndRun(side: string): [string, number | undefined] {
  const [name, run] = side.split('@');
  return [name, run === undefined ? undefined : Number(run)];
}

/**
 * One tag (default: the first job's loss) of both jobs (or runs) on one chart:
 * each run named after its side, the tags either logged to choose from.
 */
async function overlaid(a: string, b: string, tag?: string): Promise<Scalars> {
  const [aName, aRun] = jobAndRun(a);
  const [bName, bRun] = jobAndRun(b);
  const first = await serverAPI.scalars(aName, tag, aRun);
  const second = await serverAPI.scalars(
    bName,
    tag ?? first.tag ?? undefined,
    bRun
  );
  const named = (job: string, runs: Scalars['runs']) =>
    Object.fromEntries(
      Object.entries(runs).map(([run, points]) => [`${job}/${run}`, points])
    );
  return {
    ...first,
    tags: [...new Set([...first.tags, ...second.tags])].sort(),
    tag: first.tag ?? second.tag,
    runs: { ...named(a, first.runs), ...named(b, second.runs) },
    earlier: {},
    rates: {},
    written: {}
  };
}

/** The comparison of two jobs, as a tab's content. */
export class CompareWidget extends ReactWidget {
  constructor(
    readonly a: string,
    readonly b: string
  ) {
    super();
    this.addClass('jp-distrain-compare-widget');
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', `Comparison of ${a} and ${b}`);
  }

  render(): JSX.Element {
    return <CompareView a={this.a} b={this.b} />;
  }
}
