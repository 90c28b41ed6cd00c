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

/**
 * One tag of a job's scalars, a line per run (replica) over the steps, with
 * each run's last value; the tag can be changed among the job's tags.
 */
export function ScalarChart(props: {
  scalars: Scalars;
  onTag: (tag: string) => void;
}): JSX.Element | null {
  const { tags, tag, runs } = props.scalars;
  if (!tag || !Object.keys(runs).length) {
    return null;
  }
  const { line, x0, x1 } = scaled(Object.values(runs).flat(), WIDTH, HEIGHT);
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
      </h3>
      <svg
        className="jp-distrain-chart"
        viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
        preserveAspectRatio="none"
        role="img"
        aria-label={`${tag} over steps ${x0} to ${x1}`}
      >
        {Object.entries(runs).map(([run, points], index) => (
          <polyline
            key={run}
            data-run={run}
            fill="none"
            stroke={COLORS[index % COLORS.length]}
            strokeWidth={1.5}
            vectorEffect="non-scaling-stroke"
            points={line(points)}
          />
        ))}
      </svg>
      <ul className="jp-distrain-chart-legend">
        {Object.entries(runs).map(([run, points], index) => {
          const [step, value] = points[points.length - 1];
          return (
            <li key={run} data-run={run}>
              <span
                className="jp-distrain-chart-swatch"
                style={{ background: COLORS[index % COLORS.length] }}
              />
              {run}: {value.toPrecision(4)} at step {step}
            </li>
          );
        })}
      </ul>
    </section>
  );
}

/**
 * A job's main scalar in the job list: its tag, its first run's line and last
 * value.
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
      title={`${props.scalars?.tag} of ${run}: ${value} at step ${step}`}
    >
      {props.scalars?.tag}
      <svg viewBox="0 0 64 14" preserveAspectRatio="none">
        <polyline
          fill="none"
          stroke="var(--jp-brand-color1)"
          vectorEffect="non-scaling-stroke"
          points={scaled(points, 64, 14).line(points)}
        />
      </svg>
      {value.toPrecision(3)}
    </span>
  );
}

/**
 * What draws lines of [step, value] points within `width` x `height`, scaled
 * to fit all of `points`; and the steps' range.
 */
function scaled(points: number[][], width: number, height: number) {
  const steps = points.map(([step]) => step);
  const values = points.map(([, value]) => value);
  const [x0, x1] = [Math.min(...steps), Math.max(...steps)];
  const [y0, y1] = [Math.min(...values), Math.max(...values)];
  const x = (step: number) => ((step - x0) / (x1 - x0 || 1)) * width;
  const y = (value: number) =>
    height - ((value - y0) / (y1 - y0 || 1)) * height;
  const line = (run: number[][]) =>
    run.map(([s, v]) => `${x(s)},${y(v)}`).join(' ');
  return { line, x0, x1 };
}
