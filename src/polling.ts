import { Poll } from '@lumino/polling';
import * as React from 'react';

/**
 * Call `tick` now and every `interval` milliseconds (Poll.NEVER: once) while
 * the page is shown, from when the component mounts or `name` or `interval`
 * changes until it unmounts; `tick` gets the poll, to change its interval or
 * stop it. Returns what refreshes at once.
 */
export function usePoll(
  name: string,
  interval: number,
  tick: (poll: Poll) => Promise<void>
): () => Promise<void> {
  const latest = React.useRef(tick);
  latest.current = tick;
  const poll = React.useRef<Poll>();
  React.useEffect(() => {
    const current: Poll = new Poll({
      factory: () => latest.current(current),
      frequency: { interval, backoff: false },
      standby: 'when-hidden',
      name
    });
    poll.current = current;
    return () => current.dispose();
  }, [name, interval]);
  return React.useCallback(async () => poll.current?.refresh(), []);
}
