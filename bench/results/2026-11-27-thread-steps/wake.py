# What waking a process costs on this machine: two processes on a unix socketpair, one echoing
# each 60-byte message; the other times its send() alone and the round trip, 2,000 times back to
# back, then paced (5 ms apart), then back to back again.   python3 wake.py
import os, socket, time, statistics
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
pid = os.fork()
if pid == 0:
    a.close()
    while True:
        d = b.recv(64)
        if not d: os._exit(0)
        b.send(d)
b.close()
def run(pause):
    send_t, rtt = [], []
    for i in range(2000):
        t0 = time.perf_counter_ns()
        a.send(b'x' * 60)
        t1 = time.perf_counter_ns()
        a.recv(64)
        t2 = time.perf_counter_ns()
        send_t.append((t1 - t0) / 1000); rtt.append((t2 - t0) / 1000)
        if pause: time.sleep(pause)
    return statistics.median(send_t), statistics.median(rtt)
for pause in (0, 0.005, 0):
    s, r = run(pause)
    print(f"pause {pause*1000:.0f} ms: send() {s:.1f} us, round trip {r:.1f} us")
a.close()
