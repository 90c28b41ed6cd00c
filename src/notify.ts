import { Notification } from '@jupyterlab/apputils';

import { JobSummary } from './api';
import { endedSince, why } from './format';

/** Something a job's owner is told of: its end, or a new warning while it runs. */
export interface INews {
  title: string;
  body: string;
  level: 'info' | 'warning' | 'error';
  /** One browser notification per job and kind: a newer one replaces it. */
  tag: string;
}

/**
 * What changed in a job between two refreshes of the list that its owner is
 * told of: it ended, it stopped progressing (NoProgress), or a replica
 * straggles. A sweep's trials are told of through their sweep's end.
 */
export function newsOf(
  before: JobSummary | undefined,
  job: JobSummary
): INews | null {
  if (!before || job.trial_of) {
    return null;
  }
  if (endedSince(before, job)) {
    const fine = job.phase === 'Succeeded' || job.phase === 'Stopped'; // a stop is what someone asked for
    return {
      title: `Training job ${job.name} ${job.phase.toLowerCase()}`,
      body: why(job),
      level: fine ? 'info' : 'error',
      tag: `${job.name}:end`
    };
  }
  const notice = job.notice;
  if (notice && notice.time !== before.notice?.time) {
    return {
      title:
        notice.reason === 'NoProgress'
          ? `Training job ${job.name} is not progressing`
          : `Training job ${job.name}: ${notice.replica} is a straggler`,
      body: notice.message,
      level: 'warning',
      tag: `${job.name}:${notice.reason}`
    };
  }
  return null;
}

/**
 * A JupyterLab notification; while the page is hidden, with `inBrowser` and
 * the person's permission, the browser's too.
 */
export function tell(news: INews, inBrowser: boolean): void {
  const message = news.body ? `${news.title} (${news.body})` : news.title;
  Notification.emit(message, news.level, {
    autoClose: news.level === 'info' ? 5000 : false
  });
  if (inBrowser && document.hidden && browserAllows()) {
    new window.Notification(news.title, { body: news.body, tag: news.tag });
  }
}

/** Whether the browser lets this page notify. */
export function browserAllows(): boolean {
  return (
    'Notification' in window && window.Notification.permission === 'granted'
  );
}

/** Ask the person, once, whether this page may notify them through the browser. */
export function askBrowser(): void {
  if (
    'Notification' in window &&
    window.Notification.permission === 'default'
  ) {
    void window.Notification.requestPermission();
  }
}
