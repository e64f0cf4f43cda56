"""The hostile workloads, as data: what test_abuse.py and test_abuse_stress.py
run and check, and what bench/abuse_neighbour.py times a neighbour against.
name: (the offender's limits, its argv); no test machinery here."""
from __future__ import annotations

# The survivor's sleep starts before the bomb and the rest are builtins: with the pids cap
# full, dash (a micro-VM's sh) exits 2 on the first fork it cannot make, bash only retries.
FORK_BOMB = "exec 2>/dev/null; sleep 8 & s=$!; (f(){ f|f& }; f) >/dev/null; wait $s; echo survived"
# Holds every inotify instance it can get (until EMFILE), then keeps them 6 s.
INOTIFY = ("import ctypes, time\nlibc = ctypes.CDLL(None, use_errno=True)\nfds = []\n"
           "while len(fds) < 100000:\n  fd = libc.inotify_init1(0)\n  if fd < 0: break\n  fds.append(fd)\n"
           "err = ctypes.get_errno()\ntime.sleep(6)\nprint('capped', err, len(fds))")
# Loopback connections until the descriptors run out (each costs two), then a UDP
# blast at a receiver that never reads, for 3 s; all inside the sandbox's own lo.
SOCKETS = ("import socket, time\nsrv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(4096)\n"
           "conns = []\ntry:\n  while len(conns) < 100000:\n"
           "    conns.append(socket.create_connection(srv.getsockname())); conns.append(srv.accept()[0])\n"
           "except OSError as e: err = e.errno\nn = len(conns) // 2\nfor c in conns[:64]: c.close()\n"
           "rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); rx.bind(('127.0.0.1', 0))\n"
           "tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); tx.setblocking(False)\n"
           "sent, end = 0, time.monotonic() + 3\nwhile time.monotonic() < end:\n"
           "  try: tx.sendto(b'x' * 1400, rx.getsockname()); sent += 1\n  except BlockingIOError: pass\n"
           "print('capped', err, n, 'udp', sent)")
DISK_FILLER = ["sh", "-c", "dd if=/dev/zero of=/tmp/fill bs=1M 2>&1; df -k /tmp | tail -1"]
OUTPUT_FLOOD = ["head", "-c", "200000000", "/dev/zero"]

# subprocess and runsc (the default image: python3, bash, coreutils)
OFFENDERS = {
    "fork_bomb": ({"pids": 64}, ["bash", "-c", FORK_BOMB]),
    "memory_hog": ({"memory_mb": 64}, ["python3", "-c", "b = [b'x' * (1 << 20) for _ in range(400)]"]),
    "output_flood": ({}, OUTPUT_FLOOD),
    "fd_exhauster": ({}, ["python3", "-c", "import os\nfds=[]\ntry:\n  while True: fds.append(os.open('/dev/null', 0))\n"
                                           "except OSError as e: print('capped', e.errno, len(fds))"]),
    "thread_bomb": ({"pids": 128}, ["python3", "-c", "import threading, time\nn=0\ntry:\n  while True:\n"
                                    "    threading.Thread(target=time.sleep, args=(30,), daemon=True).start(); n+=1\n"
                                    "except RuntimeError as e: print('capped', n)"]),
    "disk_filler": ({"disk_mb": 64}, DISK_FILLER),
    "inotify_exhauster": ({}, ["python3", "-c", INOTIFY]),
    "socket_flood": ({}, ["python3", "-c", SOCKETS]),
}

# microvm: the guest boots the default image too, but every workload costs seconds under TCG
VM_OFFENDERS = {
    "fork_bomb": ({"pids": 64}, ["sh", "-c", FORK_BOMB]),
    # One 400 MiB buffer: the guest's RAM (--memory plus the kernel's share) refuses it at once.
    # Python's 400 pieces of 1 MiB instead thrash the guest's memory cgroup (its binary's pages
    # read again and again from the image disk) until the exec's timeout, no OOM kill in sight.
    "memory_hog": ({"memory_mb": 64}, ["dd", "if=/dev/zero", "of=/dev/null", "bs=400M", "count=1"]),
    "output_flood": ({}, OUTPUT_FLOOD),
    "disk_filler": ({"disk_mb": 64}, DISK_FILLER),
    # Each meets the guest kernel's own limit, as on the host: the nofile soft limit (1024),
    # the guest's pids cgroup, 128 inotify instances for the guest's root, the guest's loopback.
    "fd_exhauster": OFFENDERS["fd_exhauster"],
    "thread_bomb": OFFENDERS["thread_bomb"],
    "inotify_exhauster": OFFENDERS["inotify_exhauster"],
    "socket_flood": OFFENDERS["socket_flood"],
}

# deno: Python (Pyodide) and JS in one Deno process per sandbox, no shell, no processes.
# name: (the offender's limits, its argv, the exec's timeout in s). 512 MiB is the default
# memory cap, written out: the agent's caps follow it (V8 heap 256 MiB per isolate,
# Python's WebAssembly memory ~160 MiB, output 32 MiB); at 128 MiB Python cannot load.
DENO_OFFENDERS = {
    "py_memory_hog": ({"memory_mb": 512}, ["python3", "-c", "b = [b'x' * (1 << 20) for _ in range(1000)]"], 60),
    # Past the V8 heap limit (--max-old-space-size).
    "js_memory_hog": ({"memory_mb": 512}, ["node", "-e", "const a = []; while (true) a.push(new Array(1e6).fill(1.5))"], 60),
    # Outside the V8 heap (typed arrays' backing stores): only the cgroup's memory cap holds it.
    "js_buffer_hog": ({"memory_mb": 512}, ["node", "-e", "const a = []; while (true) a.push(new Uint8Array(1 << 20).fill(1))"], 60),
    "py_cpu_loop": ({}, ["python3", "-c", "while True: pass"], 3),
    "js_cpu_loop": ({}, ["node", "-e", "while (true) {}"], 3),
    "py_output_flood": ({}, ["python3", "-c", "import sys\nwhile True: sys.stdout.write('x' * (1 << 20))"], 60),
    "js_output_flood": ({}, ["node", "-e", "const s = 'x'.repeat(1 << 20); while (true) console.log(s)"], 60),
}

# stress-ng classes (the host view as image: stress-ng is the host's). A CPU quota of a
# tenth of a core is met even when a loaded host gives the sandbox little more.
# class: (limits, stress-ng arguments, the cap whose cgroup counter must move, or None)
STRESS_SECONDS = 4
STRESS = {
    "cpu": ({"cpus": 0.1}, ["--cpu", "4"], "cpu"),
    "vm": ({"memory_mb": 64}, ["--vm", "2", "--vm-bytes", "256M"], "memory"),
    "fork": ({"pids": 64}, ["--fork", "4", "--fork-max", "64"], "pids"),
    "io": ({}, ["--io", "2"], None),
    "pipe": ({"cpus": 0.1}, ["--pipe", "2"], "cpu"),
    "timer": ({}, ["--timer", "2"], None),
}


def stress_argv(cls: str) -> list[str]:
    return ["stress-ng", *STRESS[cls][1], "--timeout", f"{STRESS_SECONDS}s", "--metrics-brief"]
