/**
 * What code a job's restart or copy runs, in words: the commit it was pinned
 * to next to what its ref names now, the changes it ran on that commit, or a
 * directory's files as they are. No JupyterLab imports, so it is unit-tested
 * on its own.
 */
import type { JobCode } from '../api';

const SHORT = 7;

function short(commit: string): string {
  return commit.slice(0, SHORT);
}

function commits(count: number): string {
  return `${count} commit${count === 1 ? '' : 's'}`;
}

/** Whether the job's ref can move: a branch or tag, not the commit itself. */
function moves(code: JobCode): boolean {
  return Boolean(code.ref && code.ref !== code.commit);
}

export interface IRestartCode {
  /** What the job's code is, in a sentence or two. */
  said: string;
  /** Whether to ask before restarting: the code is not its ref as it is now. */
  asks: boolean;
  /** The choice to restart on the ref as it is now, where it may have moved. */
  repin?: string;
  /** The choice to restart on the same code. */
  same: string;
}

/**
 * What a restart of `job` says of its code: a directory runs its files as they
 * are then; a commit is named, with how far behind its ref it is (where
 * known), and the ref as it is now offered.
 */
export function restartCode(job: string, code: JobCode): IRestartCode {
  if (!code.git || !code.commit) {
    return code.path
      ? {
          said: `${job} runs the files of ${code.path} as they are when its run starts: a directory is not pinned to a commit.`,
          asks: true,
          same: 'Restart'
        }
      : { said: '', asks: false, same: 'Restart' };
  }
  const commit = short(code.commit);
  const ref = code.ref ?? '';
  const current = code.head === code.commit;
  let said: string;
  if (!moves(code)) {
    said = `${job} runs commit ${commit}`;
  } else if (current) {
    said = `${job} runs commit ${commit}, ${ref} as it is now`;
  } else if (!code.head) {
    said = `${job} ran commit ${commit} of ${ref}; whether ${ref} moved on since is not known: ${code.unreachable}`;
  } else if (code.behind) {
    said = `${job} ran commit ${commit}, ${commits(code.behind)} behind ${ref} (now ${short(code.head)})`;
  } else {
    said = `${job} ran commit ${commit}; ${ref} has moved on since (now ${short(code.head)})`;
  }
  const files = code.snapshot?.files;
  if (files) {
    said += `, with the changes it was submitted with (${files.join(', ')})`;
  }
  return {
    said: `${said}.`,
    asks: !current || Boolean(files),
    ...(moves(code) && !current
      ? {
          repin: `Restart on ${ref} as it is now${files ? ', without those changes' : ''}`
        }
      : {}),
    same: `Restart commit ${commit}${files ? ' with those changes' : ''}`
  };
}

/**
 * A copy's two choices of code, for a job on a branch or tag: the same commit
 * as `job` (`code`), or `ref` (the draft's) as it is now; null where there is
 * nothing to choose.
 */
export function cloneChoices(
  job: string,
  code: JobCode,
  ref: string
): { same: string; now: string } | null {
  if (!code.git || !code.commit || !moves(code)) {
    return null;
  }
  const changes = Boolean(code.snapshot);
  let head = ', pinned when submitted';
  if (code.head && ref === code.ref) {
    head =
      code.head === code.commit
        ? `: ${short(code.head)}, the same`
        : `: ${short(code.head)}${code.behind ? `, ${commits(code.behind)} newer` : ''}`;
  }
  return {
    same: `Same commit as ${job}: ${short(code.commit)}${changes ? ', with its changes' : ''}`,
    now: `${ref} as it is now${head}${changes ? ', without those changes' : ''}`
  };
}

/** What to know of a copy's code: a directory's files (`path`) run as they are. */
export function copyNotes(job: string, path?: string | null): string[] {
  return path
    ? [
        `${job} ran the files of ${path}; this job runs them as they are when it starts: a directory is not pinned to a commit.`
      ]
    : [];
}
