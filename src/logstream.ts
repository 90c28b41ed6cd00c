import { Poll } from '@lumino/polling';
import * as React from 'react';

import { isGone, isRefused, Job, jobsAPI, LogHit, logStream } from './api';
import { LogBuffer } from './logbuffer';
import { usePoll } from './polling';

const RECONNECT_MS = 1000;
const MAX_RECONNECT_MS = 30_000;
const RUN_CHECK_MS = 3000; // how often a view of the latest run looks for a restart
const CAPACITY = 200_000; // lines a view holds

export type Status =
  | { state: 'connecting' | 'following' | 'paused' }
  | { state: 'ended'; phase: string }
  | { state: 'error'; message: string };

export interface ILogStream {
  /** The job, for its replicas and runs; null until read. */
  job: Job | null;
  /** The run shown: the one asked for, else the job's latest. */
  run: number | undefined;
  /** The lines received, kept up to the buffer's capacity. */
  held: LogBuffer;
  status: Status;
}

/**
 * The log of one run of a job (`pinnedRun`, else the latest), one replica or
 * all ('' for all), streamed into a buffer unless `paused`: from each replica's
 * last lines (as many as the buffer holds between them), or from a little
 * before a search's hit `at`. A new replica, run or hit starts a new buffer;
 * the latest run's view checks now and then for a restart.
 */
export function useLogStream(
  name: string,
  replica: string,
  pinnedRun: number | undefined,
  paused: boolean,
  at?: LogHit
): ILogStream {
  const [job, setJob] = React.useState<Job | null>(null);
  const [status, setStatus] = React.useState<Status>({ state: 'connecting' });
  const [, setVersion] = React.useState(0);
  const buffer = React.useRef(new LogBuffer());
  const pinned = pinnedRun !== undefined;
  const run = pinnedRun ?? job?.run;

  // The job, for its replicas and runs; a view of the latest run checks now
  // and then for a restart.
  usePoll(
    `jupyter-distrain:logs:${name}`,
    pinned ? Poll.NEVER : RUN_CHECK_MS,
    poll =>
      jobsAPI.get(name).then(setJob, error => {
        if (isGone(error)) {
          setStatus({ state: 'error', message: `${name} no longer exists` });
          void poll.stop();
        }
      })
  );

  // A new replica, run or hit starts a new buffer.
  const replicas = replica ? 1 : Math.max(1, job?.logs.length ?? 1);
  React.useEffect(() => {
    buffer.current = new LogBuffer(
      CAPACITY,
      at ? { at } : { tail: Math.floor(CAPACITY / replicas) }
    );
    setVersion(v => v + 1);
  }, [name, replica, run, at, replicas]);

  React.useEffect(() => {
    if (run === undefined) {
      return;
    }
    if (paused) {
      setStatus({ state: 'paused' });
      return;
    }
    let frame = 0;
    const redraw = () => {
      frame ||= requestAnimationFrame(() => {
        frame = 0;
        setVersion(v => v + 1);
      });
    };
    const close = follow(
      { name, replica, run, pinned },
      buffer.current,
      setStatus,
      redraw
    );
    return () => {
      close();
      cancelAnimationFrame(frame);
    };
  }, [name, replica, run, paused]);

  return { job, run, held: buffer.current, status };
}

/**
 * Stream a log into `held` from its cursor, reconnecting (backing off) when the
 * connection drops until the stream ends or is refused; `redraw` is called as
 * lines arrive. Returns what closes the stream.
 */
function follow(
  log: { name: string; replica: string; run: number; pinned: boolean },
  held: LogBuffer,
  setStatus: (status: Status) => void,
  redraw: () => void
): () => void {
  const { name, run } = log;
  const replica = log.replica || undefined;
  let socket: WebSocket;
  let done = false;
  let retry: ReturnType<typeof setTimeout>;
  let delay = RECONNECT_MS;
  const retryLater = () => {
    if (!done) {
      retry = setTimeout(connect, delay);
      delay = Math.min(2 * delay, MAX_RECONNECT_MS);
    }
  };
  const connect = () => {
    setStatus({ state: 'connecting' });
    let opened = false;
    const { tail, at } = held.begins;
    socket = logStream(name, {
      replica,
      run,
      // where the last connection stopped, else where the buffer begins
      ...(held.cursor
        ? { cursor: held.cursor }
        : at
          ? { cursor: `${at.replica}:${at.from}` }
          : { tail })
    });
    socket.onopen = () => {
      opened = true;
      delay = RECONNECT_MS;
      setStatus({ state: 'following' });
    };
    socket.onmessage = event => {
      const message = JSON.parse(event.data);
      if (message.type === 'lines') {
        held.append(message.replica, message.data, message.offset);
        redraw();
      } else if (message.type === 'end') {
        done = true;
        // The job's phase is its latest run's: an earlier run just ended.
        setStatus({ state: 'ended', phase: log.pinned ? '' : message.phase });
      } else if (message.type === 'error') {
        done = true;
        setStatus({ state: 'error', message: message.message });
      }
    };
    // Closed without a last word: retry. A stream refused before it opened
    // tells the browser nothing, so the same log is asked over HTTP (no lines):
    // refused there too (no such job, replica or run), it ends with the reason.
    socket.onclose = () => {
      if (done) {
        return;
      }
      setStatus({ state: 'connecting' });
      if (opened) {
        retryLater();
        return;
      }
      jobsAPI.logs(name, { replica, run, tail: 0 }).then(retryLater, error => {
        if (!isRefused(error)) {
          retryLater();
        } else if (!done) {
          done = true;
          setStatus({ state: 'error', message: error.message });
        }
      });
    };
  };
  connect();
  return () => {
    done = true;
    clearTimeout(retry);
    socket.close();
  };
}
