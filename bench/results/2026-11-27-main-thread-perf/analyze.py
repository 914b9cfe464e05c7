#!/usr/bin/env python3
# Where the daemon's main thread spends its kernel time during WebHDFS uploads, and which threads
# run the kernel's TCP transmit of the uploaded bytes, from `perf record -a -g` of a bench run.
#   perf script -i RUN.data -F tid,comm,time,ip,sym > RUN.txt
#   python3 analyze.py RUN.txt DAEMON_PID GIB      (run.sh does all of it)
# (DAEMON_PID: the bench log's "daemon for throughput ... pid N"; GIB: the GiB uploaded, warm-up included.)
import collections, sys

def samples(fn):
    cur = None
    for line in open(fn, errors='replace'):
        if not line.strip():
            if cur: yield cur
            cur = None
        elif line[0] not in ' \t':
            parts = line.split()
            ti = next(i for i, p in enumerate(parts) if p.endswith(':'))
            cur = {'comm': ' '.join(parts[:ti - 1]), 'tid': int(parts[ti - 1]), 'frames': []}
        else:
            p = line.split(None, 1)
            cur['frames'].append((p[0], p[1].strip() if len(p) > 1 else '?'))
    if cur: yield cur

fn, pid, gib = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
HZ = 299
main = collections.Counter()
transmit = collections.Counter()
for s in samples(fn):
    names = [f[1] for f in s['frames']]
    kernel = bool(s['frames']) and s['frames'][0][0].startswith('ffffffff')
    xmit = 'tcp_write_xmit' in names or '__tcp_transmit_skb' in names
    if xmit:
        transmit['daemon main' if s['tid'] == pid else s['comm']] += 1
    if s['tid'] != pid:
        continue
    main['all'] += 1
    if not kernel:
        main['user'] += 1
    elif xmit:
        main['kernel: TCP transmit (loopback delivery included)'] += 1
    elif 'try_to_wake_up' in names:
        main['kernel: waking a thread'] += 1
    elif any('copy_from_iter' in n for n in names[:2]):
        main['kernel: copying bytes into the socket'] += 1
    else:
        main['kernel: other'] += 1
per = lambda n: f'{n / HZ / gib:.3f} s/GiB'
print(f'daemon main thread ({pid}): {main["all"]} samples at {HZ} Hz over {gib} GiB = {per(main["all"])}')
for k, v in sorted(main.items(), key=lambda kv: -kv[1]):
    if k != 'all': print(f'  {k:50} {v:5}  {per(v)}')
print('samples in the kernel\'s TCP transmit path (tcp_write_xmit / __tcp_transmit_skb), by thread:')
for k, v in transmit.most_common(8):
    print(f'  {k:50} {v:5}  {per(v)}')
