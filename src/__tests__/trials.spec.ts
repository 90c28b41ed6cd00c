import type { Trial, Trials } from '../api';
import { followTrials } from '../trials';

const trial = (name: string, value: number | null = null) =>
  ({ name, value, phase: value === null ? 'Running' : 'Succeeded' }) as Trial;

const answer = (fields: Partial<Trials>) =>
  ({ name: 'lr', best: null, complete: false, ...fields }) as Trials;

describe('followTrials', () => {
  const held = followTrials(
    null,
    answer({
      trials: [trial('lr-1'), trial('lr-2')],
      order: ['lr-1', 'lr-2'],
      complete: true,
      version: 'v.1'
    })
  )!;

  it('keeps the trials not sent, the same objects, in the new order', () => {
    const next = followTrials(
      held,
      answer({ trials: [trial('lr-2', 0.5)], order: ['lr-2', 'lr-1'] })
    )!;
    expect(next.trials).toEqual([trial('lr-2', 0.5), trial('lr-1')]);
    expect(next.trials[1]).toBe(held.trials[0]);
  });

  it('takes a whole answer as it is, and another sweep as none held', () => {
    const whole = answer({
      trials: [trial('lr-3')],
      order: ['lr-3'],
      complete: true
    });
    expect(followTrials(held, whole)!.trials).toEqual([trial('lr-3')]);
    const other = answer({ name: 'bs', trials: [], order: ['bs-1'] });
    expect(followTrials(held, other)).toBeNull();
  });

  it('is null where a trial it names is neither sent nor held', () => {
    const gap = answer({ trials: [], order: ['lr-1', 'lr-9'] });
    expect(followTrials(held, gap)).toBeNull();
  });
});
