import { useVirtualizer } from '@tanstack/react-virtual';
import * as React from 'react';

import { Trial, Trials } from './api';
import { ScalarChart } from './charts';
import { PhaseBadge, ScrollingTable } from './components';

/** A column of the trials' table: its heading and the value it sorts by. */
interface IColumn {
  heading: string;
  value: (trial: Trial) => string | number | null;
}

/**
 * A sweep's trials: a table sortable by any column (best first until one is
 * chosen), every trial's metric over the steps, and "Fine-tune the best".
 */
export function SweepTrials(props: {
  trials: Trials;
  openJob: (name: string) => void;
  onFinetune: () => void;
}): JSX.Element {
  const { trials, metric, best } = props.trials;
  const [order, setOrder] = React.useState<{ column: number; up: boolean }>();
  const names = React.useMemo(
    () => Object.keys(trials[0]?.hyperparameters ?? {}),
    [trials]
  );
  const columns: IColumn[] = [
    { heading: 'Trial', value: trial => trial.number },
    { heading: 'Phase', value: trial => trial.phase ?? 'Waiting' },
    ...names.map(name => ({
      heading: name,
      value: (trial: Trial) => trial.hyperparameters[name] as string | number
    })),
    {
      heading: `${metric.tag ?? 'metric'} (${metric.goal})`,
      value: trial => trial.value
    },
    { heading: 'Step', value: trial => trial.step }
  ];
  const shown = order
    ? sorted(trials, columns[order.column], order.up)
    : trials;
  const scroller = React.useRef<HTMLDivElement>(null);
  const windowed = useVirtualizer({
    count: shown.length,
    getScrollElement: () => scroller.current,
    estimateSize: () => TRIAL_ROW,
    getItemKey: index => shown[index].name,
    overscan: 10
  });
  const drawn = windowed.getVirtualItems();
  // the rows not drawn above and below those in view keep their place
  const above = drawn[0]?.start ?? 0;
  const below = windowed.getTotalSize() - (drawn[drawn.length - 1]?.end ?? 0);
  // a trial keeps its line's color however the ranking changes
  const runs = Object.fromEntries(
    [...trials]
      .sort((a, b) => a.number - b.number)
      .filter(t => t.points.length)
      .map(t => [t.name, t.points])
  );
  return (
    <section className="jp-distrain-sweep">
      <h3>
        Trials
        <button
          className="jp-Button jp-mod-styled jp-mod-accept"
          disabled={!best}
          title={
            best
              ? `A new job from ${best}'s spec that resumes from its output`
              : 'Once a trial has succeeded'
          }
          onClick={props.onFinetune}
        >
          Fine-tune the best
        </button>
      </h3>
      <ScrollingTable
        label="Trials"
        className="jp-distrain-trials-scroll"
        ref={scroller}
      >
        <table className="jp-distrain-table jp-distrain-trials">
          <thead>
            <tr>
              {columns.map((column, index) => (
                <th
                  key={column.heading}
                  aria-sort={
                    order?.column === index
                      ? order.up
                        ? 'ascending'
                        : 'descending'
                      : 'none'
                  }
                >
                  <button
                    className="jp-distrain-sort"
                    onClick={() =>
                      setOrder({
                        column: index,
                        up: order?.column === index ? !order.up : true
                      })
                    }
                  >
                    {column.heading}
                  </button>
                </th>
              ))}
            </tr>
          </thead>
          <tbody>
            {above > 0 && <tr aria-hidden="true" style={{ height: above }} />}
            {drawn.map(({ index, key }) => (
              <TrialRow
                key={key}
                index={index}
                measure={windowed.measureElement}
                trial={shown[index]}
                names={names}
                best={best}
                openJob={props.openJob}
              />
            ))}
            {below > 0 && <tr aria-hidden="true" style={{ height: below }} />}
          </tbody>
        </table>
      </ScrollingTable>
      {metric.tag && (
        <ScalarChart
          scalars={{
            tags: [metric.tag],
            tag: metric.tag,
            runs,
            earlier: {},
            rates: {},
            written: {}
          }}
          onTag={() => undefined}
        />
      )}
    </section>
  );
}

/** Rows of the trials' table are about this high (one line; each is measured as drawn). */
const TRIAL_ROW = 30;

/** A trial's row: its name (which opens it), phase, values, metric and step. */
const TrialRow = React.memo(
  (props: {
    index: number;
    measure: (row: HTMLTableRowElement | null) => void;
    trial: Trial;
    names: string[];
    best: string | null;
    openJob: (name: string) => void;
  }): JSX.Element => {
    const { trial, best } = props;
    return (
      <tr
        ref={props.measure}
        data-index={props.index}
        data-trial={trial.name}
        className={trial.name === best ? 'jp-distrain-best' : ''}
      >
        <td>
          <button
            className="jp-Button jp-mod-minimal"
            disabled={!trial.phase}
            onClick={() => props.openJob(trial.name)}
          >
            {trial.name}
          </button>
          {trial.name === best && ' ★'}
        </td>
        <td>{trial.phase ? <PhaseBadge phase={trial.phase} /> : 'Waiting'}</td>
        {props.names.map(name => (
          <td key={name} className="jp-distrain-mono">
            {JSON.stringify(trial.hyperparameters[name])}
          </td>
        ))}
        <td className="jp-distrain-metric">
          {trial.value === null ? '–' : trial.value.toPrecision(4)}
        </td>
        <td>{trial.step ?? '–'}</td>
      </tr>
    );
  }
);

/** The trials by a column's values, those without one last either way. */
function sorted(trials: Trial[], column: IColumn, up: boolean): Trial[] {
  return [...trials].sort((a, b) => {
    const [x, y] = [column.value(a), column.value(b)];
    if (x === null || y === null) {
      return x === y ? 0 : x === null ? 1 : -1;
    }
    return (x < y ? -1 : x > y ? 1 : 0) * (up ? 1 : -1);
  });
}
