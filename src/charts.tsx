import * as React from 'react';

import { Scalars } from './api';

const WIDTH = 600;
const HEIGHT = 140;
const COLORS = [
  'var(--jp-brand-color1)',
  'var(--jp-warn-color1)',
  'var(--jp-success-color1)',
  'var(--jp-error-color1)',
  'var(--jp-accent-color1)',
  'var(--jp-ui-font-color2)'
];

/** [step, value] points; a value that was not a finite number (a diverging loss) is null, and not drawn. */
type Points = (number | null)[][];

/**
 * One tag of a job's scalars, a line per run (replica) over the steps, with
 * each run's last value and the axes' ranges; the tag can be changed among the
 * job's tags. The lines of the job's earlier runs (before a restart) are
 * dashed, and can be hidden.
 */
export function ScalarChart(props: {
  scalars: Scalars;
  onTag: (tag: string) => void;
}): JSX.Element | null {
  const { tags, tag, runs, earlier } = props.scalars;
  const [showEarlier, setShowEarlier] = React.useState(true);
  const names = [...new Set([...Object.keys(runs), ...Object.keys(earlier)])];
  if (!tag || !names.length) {
    return null;
  }
  const color = (run: string) => COLORS[names.indexOf(run) % COLORS.length];
  const before = showEarlier ? earlier : {};
  const drawn = [
    ...Object.values(runs),
    ...Object.values(before).flat()
  ].flat();
  const { line, x0, x1, y0, y1 } = scaled(drawn, WIDTH, HEIGHT);
  return (
    <section className="jp-distrain-scalars">
      <h3>
        Metrics
        <select
          className="jp-mod-styled"
          aria-label="Metric"
          value={tag}
          onChange={event => props.onTag(event.target.value)}
        >
          {tags.map(name => (
            <option key={name}>{name}</option>
          ))}
        </select>
        {Object.keys(earlier).length > 0 && (
          <label className="jp-distrain-earlier-toggle">
            <input
              type="checkbox"
              checked={showEarlier}
              onChange={event => setShowEarlier(event.target.checked)}
            />
            Earlier runs (dashed)
          </label>
        )}
      </h3>
      <div className="jp-distrain-chart-frame">
        <div className="jp-distrain-chart-y" aria-hidden="true">
          <span>{short(y1)}</span>
          <span>{tag}</span>
          <span>{short(y0)}</span>
        </div>
        <svg
          className="jp-distrain-chart"
          viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
          preserveAspectRatio="none"
          role="img"
          aria-label={`${tag} from ${short(y0)} to ${short(y1)} over steps ${x0} to ${x1}`}
        >
          {Object.entries(before).map(([run, segments]) =>
            segments.map((points, index) => (
              <Line
                key={`${run}-${index}`}
                run={run}
                earlier
                color={color(run)}
                points={line(points)}
              />
            ))
          )}
          {Object.entries(runs).map(([run, points]) => (
            <Line
              key={run}
              run={run}
              color={color(run)}
              points={line(points)}
            />
          ))}
        </svg>
        <div className="jp-distrain-chart-x" aria-hidden="true">
          <span>{x0}</span>
          <span>step</span>
          <span>{x1}</span>
        </div>
      </div>
      <ul className="jp-distrain-chart-legend">
        {Object.entries(runs).map(([run, points]) => {
          const [step, value] = points[points.length - 1];
          return (
            <li key={run} data-run={run}>
              <span
                className="jp-distrain-chart-swatch"
                style={{ background: color(run) }}
              />
              {run}: {valueText(value, 4)} at step {step}
            </li>
          );
        })}
        {!Object.keys(runs).length && (
          <li>This run has logged no {tag} yet.</li>
        )}
      </ul>
    </section>
  );
}

/** One series: a line, or a dot when it has one point. */
function Line(props: {
  run: string;
  color: string;
  points: string;
  earlier?: boolean;
}): JSX.Element {
  const dot = !props.points.includes(' ');
  return (
    <polyline
      data-run={props.run}
      data-earlier={props.earlier || undefined}
      fill="none"
      stroke={props.color}
      strokeWidth={dot ? 6 : 1.5}
      strokeLinecap="round"
      strokeDasharray={props.earlier ? '4 3' : undefined}
      opacity={props.earlier ? 0.6 : undefined}
      vectorEffect="non-scaling-stroke"
      points={dot ? `${props.points} ${props.points}` : props.points}
    />
  );
}

/**
 * A job's main scalar in the job list: its tag, its first run's line in the
 * job's current run, and last value.
 */
export function Sparkline(props: { scalars?: Scalars }): JSX.Element | null {
  const [run, points] = Object.entries(props.scalars?.runs ?? {})[0] ?? [];
  if (!points?.length) {
    return null;
  }
  const [step, value] = points[points.length - 1];
  return (
    <span
      className="jp-distrain-sparkline"
      title={`${props.scalars?.tag} of ${run}: ${valueText(value, 6)} at step ${step}`}
    >
      {props.scalars?.tag}
      <svg viewBox="0 0 64 14" preserveAspectRatio="none" aria-hidden="true">
        <Line
          run={run}
          color="var(--jp-brand-color1)"
          points={scaled(points, 64, 14).line(points)}
        />
      </svg>
      {valueText(value, 3)}
    </span>
  );
}

/** A value in `digits` significant digits; "not a number" where it had none. */
function valueText(value: number | null, digits: number): string {
  return value === null ? 'not a number' : value.toPrecision(digits);
}

/** A value in three significant digits, without trailing zeros. */
function short(value: number): string {
  return String(Number(value.toPrecision(3)));
}

/**
 * What draws lines of [step, value] points within `width` x `height`, scaled
 * to fit all of `points` (one step, or one value, in the middle); and their
 * ranges.
 */
function scaled(points: Points, width: number, height: number) {
  const drawn = points.filter(([, value]) => value !== null) as number[][];
  const steps = points.map(([step]) => step as number);
  const values = drawn.length ? drawn.map(([, value]) => value) : [0];
  const [x0, x1] = [Math.min(...steps), Math.max(...steps)];
  const [y0, y1] = [Math.min(...values), Math.max(...values)];
  const x = (step: number) =>
    x1 > x0 ? ((step - x0) / (x1 - x0)) * width : width / 2;
  const y = (value: number) =>
    y1 > y0 ? height - ((value - y0) / (y1 - y0)) * height : height / 2;
  const line = (run: Points) =>
    run
      .filter(([, v]) => v !== null)
      .map(([s, v]) => `${x(s as number)},${y(v as number)}`)
      .join(' ');
  return { line, x0, x1, y0, y1 };
}
