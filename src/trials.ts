import type { Trial, Trials } from './api';

/**
 * The table an answer of serverAPI.trials brings `held` to: the trials it
 * sends, the others as held (the same objects: their rows are not drawn
 * again), in the answer's order; null where a trial it names is in neither
 * (then ask for the whole table).
 */
export function followTrials(
  held: Trials | null,
  answer: Trials
): Trials | null {
  const known = new Map(
    (answer.complete || held?.name !== answer.name ? [] : held.trials).map(
      trial => [trial.name, trial]
    )
  );
  for (const trial of answer.trials) {
    known.set(trial.name, trial);
  }
  const trials = (answer.order ?? []).map(name => known.get(name));
  return trials.every(trial => trial !== undefined)
    ? { ...answer, trials: trials as Trial[] }
    : null;
}
