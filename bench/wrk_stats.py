#!/usr/bin/python3
"""Prints "exec/s p50 p99" (ms) from a `wrk --latency` report; only 2xx answers count toward the rate."""
import re
import sys

text = open(sys.argv[1]).read()


def percentile_ms(p: int) -> float:
    m = re.search(r"^\s+%s%%\s+([\d.]+)(us|ms|s)" % p, text, re.M)
    v, unit = float(m.group(1)), m.group(2)
    return {"us": v / 1000, "ms": v, "s": v * 1000}[unit]


rate = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
total = int(re.search(r"(\d+) requests in", text).group(1))
failed = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
rate *= (total - (int(failed.group(1)) if failed else 0)) / max(total, 1)
print(f"{rate:.1f} {percentile_ms(50):.3f} {percentile_ms(99):.3f}")
