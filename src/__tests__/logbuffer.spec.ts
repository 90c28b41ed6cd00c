import { LogBuffer } from '../logbuffer';

describe('LogBuffer', () => {
  it('splits messages into timed lines and keeps the cursor of each replica', () => {
    const buffer = new LogBuffer();
    buffer.append(
      'chief-0',
      '2026-01-01T00:00:01Z hello\n2026-01-01T00:00:02Z world\n',
      60
    );
    buffer.append('worker-0', '2026-01-01T00:00:03Z ready\n', 27);
    expect(buffer.end - buffer.first).toBe(3);
    expect(buffer.at(1)).toEqual({
      replica: 'chief-0',
      time: '2026-01-01T00:00:02Z',
      text: 'world',
      stderr: false
    });
    expect(buffer.cursor).toBe('chief-0:60,worker-0:27');
    buffer.append('chief-0', '2026-01-01T00:00:04Z again\n', 86);
    expect(buffer.cursor).toBe('chief-0:86,worker-0:27');
  });

  it('says whether earlier lines of the log are not held', () => {
    const line = (n: number) => `2026-01-01T00:00:0${n}Z line ${n}\n`;
    const whole = new LogBuffer(10, { tail: 2 });
    whole.append('worker-0', line(1), 30);
    expect(whole.cut).toBe(false); // fewer lines than the tail asked: the log began there
    whole.append('worker-0', line(2), 60);
    expect(whole.cut).toBe(true); // as many: earlier ones may not have come
    const kept = new LogBuffer(2);
    kept.append('worker-0', line(1) + line(2), 60);
    expect(kept.cut).toBe(false);
    kept.append('worker-0', line(3), 90);
    expect(kept.cut).toBe(true); // the first was dropped
    const hit = { replica: 'worker-0', offset: 30, time: '', text: 'line 1' };
    const at = new LogBuffer(10, {
      at: { ...hit, stderr: false, from: 0, before: 1 }
    });
    expect(at.cut).toBe(true);
  });

  it('marks the lines written to stderr', () => {
    const buffer = new LogBuffer();
    buffer.append(
      'worker-0',
      '2026-01-01T00:00:01Z epoch 1!\n2026-01-01T00:00:02Z!ValueError: bad lr\n',
      80
    );
    expect([buffer.at(0), buffer.at(1)]).toEqual([
      {
        replica: 'worker-0',
        time: '2026-01-01T00:00:01Z',
        text: 'epoch 1!',
        stderr: false
      },
      {
        replica: 'worker-0',
        time: '2026-01-01T00:00:02Z',
        text: 'ValueError: bad lr',
        stderr: true
      }
    ]);
  });

  it('drops the oldest lines past its capacity, numbering lines as they came', () => {
    const buffer = new LogBuffer(100);
    for (let i = 0; i < 1000; i++) {
      buffer.append('w', `t line ${i}\n`, i);
    }
    expect(buffer.first).toBe(900);
    expect(buffer.end).toBe(1000);
    expect(buffer.at(900).text).toBe('line 900');
    expect(buffer.at(999).text).toBe('line 999');
  });

  it('finds lines, case-insensitively, among those held', () => {
    const buffer = new LogBuffer(3);
    for (const text of ['Loss 1', 'acc', 'loss 2', 'LOSS 3']) {
      buffer.append('w', `t ${text}\n`, 0);
    }
    expect(buffer.search('loss')).toEqual([2, 3]);
    expect(buffer.search('loss', 3)).toEqual([3]);
  });

  it('keeps all replicas in time order when a backlog comes a replica at a time', () => {
    const buffer = new LogBuffer();
    const lines = (replica: string, seconds: number[]) =>
      seconds.map(s => `2026-01-01T00:00:0${s}Z ${replica} ${s}\n`).join('');
    buffer.append('chief-0', lines('chief-0', [1, 3, 5]), 10);
    buffer.append('worker-0', lines('worker-0', [2, 3, 4]), 10);
    buffer.append('worker-0', lines('worker-0', [6]), 20);
    const texts = [];
    for (let n = buffer.first; n < buffer.end; n++) {
      texts.push(buffer.at(n).text);
    }
    expect(texts).toEqual([
      'chief-0 1',
      'worker-0 2',
      'chief-0 3',
      'worker-0 3',
      'worker-0 4',
      'chief-0 5',
      'worker-0 6'
    ]);
    expect(buffer.reordered).toBe(1); // the second message went in among held lines
  });
});
