import type { JobCode } from '../api';
import { cloneChoices, copyNotes, restartCode } from '../form/pinned';

const OLD = 'a'.repeat(40);
const NEW = 'b'.repeat(40);
const git = (now: Partial<JobCode>): JobCode => ({
  git: '/home/me/project',
  ref: 'main',
  commit: OLD,
  snapshot: null,
  head: OLD,
  behind: 0,
  unreachable: null,
  ...now
});

describe('what a restart says of the code it runs', () => {
  it('restarts at once a job that runs its branch as it is now', () => {
    expect(restartCode('fit', git({}))).toEqual({
      said: 'fit runs commit aaaaaaa, main as it is now.',
      asks: false,
      same: 'Restart commit aaaaaaa'
    });
    expect(restartCode('fit', { path: null }).asks).toBe(false); // no code
  });

  it('names the commit, how far behind its branch, and offers the branch of now', () => {
    expect(restartCode('fit', git({ head: NEW, behind: 2 }))).toEqual({
      said: 'fit ran commit aaaaaaa, 2 commits behind main (now bbbbbbb).',
      asks: true,
      repin: 'Restart on main as it is now',
      same: 'Restart commit aaaaaaa'
    });
    expect(restartCode('fit', git({ head: NEW, behind: null })).said).toBe(
      'fit ran commit aaaaaaa; main has moved on since (now bbbbbbb).'
    );
    const unreachable = git({
      head: null,
      behind: null,
      unreachable: 'no answer from https://h/r.git within 15 s'
    });
    expect(restartCode('fit', unreachable)).toMatchObject({
      said: 'fit ran commit aaaaaaa of main; whether main moved on since is not known: no answer from https://h/r.git within 15 s.',
      asks: true,
      repin: 'Restart on main as it is now'
    });
  });

  it('says that a snapshot of changes runs again, and that a directory runs as it is', () => {
    const changes = git({ snapshot: { files: ['M train.py', 'A new.py'] } });
    expect(restartCode('fit', changes)).toEqual({
      said: 'fit runs commit aaaaaaa, main as it is now, with the changes it was submitted with (M train.py, A new.py).',
      asks: true,
      same: 'Restart commit aaaaaaa with those changes'
    });
    expect(restartCode('fit', { ...changes, head: NEW, behind: 1 }).repin).toBe(
      'Restart on main as it is now, without those changes'
    );
    expect(restartCode('fit', { path: '/home/me/code' })).toEqual({
      said: 'fit runs the files of /home/me/code as they are when its run starts: a directory is not pinned to a commit.',
      asks: true,
      same: 'Restart'
    });
    expect(restartCode('fit', git({ ref: OLD })).said).toBe(
      'fit runs commit aaaaaaa.'
    );
  });
});

describe('what a copy of a job runs', () => {
  it('offers the same commit or the branch as it is now', () => {
    expect(cloneChoices('fit', git({ head: NEW, behind: 2 }), 'main')).toEqual({
      same: 'Same commit as fit: aaaaaaa',
      now: 'main as it is now: bbbbbbb, 2 commits newer'
    });
    expect(cloneChoices('fit', git({}), 'main')?.now).toBe(
      'main as it is now: aaaaaaa, the same'
    );
    // another ref typed, or an answer missing: pinned at submit
    expect(cloneChoices('fit', git({ head: NEW }), 'v2')?.now).toBe(
      'v2 as it is now, pinned when submitted'
    );
    const changes = git({ snapshot: { files: ['M a.py'] }, head: null });
    expect(cloneChoices('fit', changes, 'main')).toEqual({
      same: 'Same commit as fit: aaaaaaa, with its changes',
      now: 'main as it is now, pinned when submitted, without those changes'
    });
    // nothing to choose: a commit for a ref, or a directory
    expect(cloneChoices('fit', git({ ref: OLD }), OLD)).toBeNull();
    expect(cloneChoices('fit', { path: '/code' }, '')).toBeNull();
  });

  it('says that a directory runs as it is when the copy starts', () => {
    expect(copyNotes('fit', '/home/me/code')).toEqual([
      'fit ran the files of /home/me/code; this job runs them as they are when it starts: a directory is not pinned to a commit.'
    ]);
    expect(copyNotes('fit', undefined)).toEqual([]);
  });
});
