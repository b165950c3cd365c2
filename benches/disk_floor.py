#!/usr/bin/env python3
"""The disk's floor under (d) of benches/e2e.sh: the acknowledgment latency of an ideal group
committer, which spends no CPU on anything but the disk.

Events arrive open loop at RATE per second (evenly spaced, like loadgen's intended send times).
One loop, as fast as it can: take every event that has arrived (at most as many as fill the ring
file, below), append BYTES_PER_EVENT bytes each to a file, fdatasync it (R14: durable before the
answer), and "acknowledge" them all. An event's latency runs from its arrival to the end of the
first fdatasync started after it arrived, so a slow sync delays every event that arrives during
it, as it does in hookwall's group commit. When nothing has arrived the loop sleeps, then spins
for the last 200 microseconds, so a late wake-up does not count as the disk's.

A server that writes these bytes per event and acknowledges only after fdatasync meets at least
these latencies on this disk at this rate, in this window of time: (d)'s p99 against this p99 says how much of it is the disk and how much is
hookwall. The file (64 MiB) is written once before the run and then overwritten in a ring, like
a WAL file RocksDB reuses (`recycle_log_file_num`), so a sync writes data and no file metadata.

Usage: disk_floor.py DIR RATE SECONDS BYTES_PER_EVENT
  RATE: events per second, 1..=1000000; SECONDS: 0.001..=3600; BYTES_PER_EVENT: 1..=1048576;
  RATE x SECONDS at most 2000000 events.
Prints one JSON object (latencies in microseconds, nearest rank: min, p50, p90, p99, p99_9, max;
syncs, events, mean events per sync). Bounded: events stop arriving after SECONDS, and if the disk has not
acknowledged every event by SECONDS + max(SECONDS, 10) it stops, prints the report with
"unanswered" > 0 and exits 1. Exits 2 on bad arguments or an unusable DIR. The ring file is
removed at the end, also on SIGTERM or SIGINT.
"""
import array
import json
import math
import os
import signal
import sys
import time

RING_BYTES = 64 << 20
SPIN_SECONDS = 0.0002
RATE_MAX = 1_000_000
SECONDS_MAX = 3600
EVENTS_MAX = 2_000_000
BYTES_PER_EVENT_MAX = 1 << 20


def fail(message):
    print(f"disk_floor.py: {message}", file=sys.stderr)
    sys.exit(2)


def number(text, name, parse):
    try:
        value = parse(text)
    except ValueError:
        fail(f"{name} must be a number, not {text!r}")
    if isinstance(value, float) and not math.isfinite(value):
        fail(f"{name} must be finite, not {text!r}")
    return value


def arguments():
    if len(sys.argv) != 5:
        fail("usage: disk_floor.py DIR RATE SECONDS BYTES_PER_EVENT")
    directory = sys.argv[1]
    rate = number(sys.argv[2], "RATE", float)
    seconds = number(sys.argv[3], "SECONDS", float)
    per_event = number(sys.argv[4], "BYTES_PER_EVENT", int)
    if not 1 <= rate <= RATE_MAX:
        fail(f"RATE must be 1..={RATE_MAX} events per second, not {sys.argv[2]}")
    if not 0.001 <= seconds <= SECONDS_MAX:
        fail(f"SECONDS must be 0.001..={SECONDS_MAX}, not {sys.argv[3]}")
    if not 1 <= per_event <= BYTES_PER_EVENT_MAX:
        fail(f"BYTES_PER_EVENT must be 1..={BYTES_PER_EVENT_MAX}, not {sys.argv[4]}")
    if rate * seconds > EVENTS_MAX:
        fail(f"RATE x SECONDS must be at most {EVENTS_MAX} events, not {rate * seconds:.0f}")
    if not os.path.isdir(directory):
        fail(f"DIR must be an existing directory, not {directory!r}")
    return directory, rate, seconds, per_event


def percentile(sorted_us, q):
    """Nearest rank, as HdrHistogram reports it: the smallest value with a share q at or below."""
    return sorted_us[max(0, math.ceil(q * len(sorted_us)) - 1)]


def run(fd, rate, seconds, per_event):
    """Returns (latencies in seconds, syncs, unanswered)."""
    chunk = b"\0" * (1 << 20)
    for _ in range(RING_BYTES >> 20):
        os.write(fd, chunk)
    os.fsync(fd)
    batch_max = max(1, RING_BYTES // per_event)  # events per sync: one batch fits the ring
    record = memoryview(b"w" * (batch_max * per_event))
    latencies = array.array("d")
    syncs = 0
    offset = 0
    acked = 0  # events 0..acked have been acknowledged
    total = max(1, math.ceil(seconds * rate - 1e-9))  # arrivals at start + k / rate, k < total
    start = time.monotonic()
    deadline = start + seconds + max(seconds, 10.0)
    while acked < total:
        now = time.monotonic()
        if now > deadline:
            break
        arrived = min(total, int((now - start) * rate) + 1)
        if arrived <= acked:
            # Nothing waiting: sleep until just before the next arrival, then spin to it.
            wait = start + acked / rate - now
            if wait > SPIN_SECONDS:
                time.sleep(wait - SPIN_SECONDS)
            continue
        n = min(arrived - acked, batch_max)
        size = n * per_event
        if offset + size > RING_BYTES:
            offset = 0
        written = 0
        while written < size:
            written += os.pwrite(fd, record[written:size], offset + written)
        offset += size
        os.fdatasync(fd)
        done = time.monotonic()
        syncs += 1
        for k in range(acked, acked + n):
            latencies.append(done - (start + k / rate))
        acked += n
    return latencies, syncs, total - acked


def stop(signum, _frame):
    sys.exit(128 + signum)  # unwinds through main's `finally`, which removes the ring file


def main():
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    directory, rate, seconds, per_event = arguments()
    path = os.path.join(directory, f"disk-floor-{os.getpid()}.wal")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        fail(f"cannot create {path}: {e.strerror}")
    try:
        try:
            latencies, syncs, unanswered = run(fd, rate, seconds, per_event)
        except OSError as e:
            print(f"disk_floor.py: writing {path}: {e.strerror}", file=sys.stderr)
            sys.exit(2)
    finally:
        os.close(fd)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    us = sorted(x * 1e6 for x in latencies)
    report = {
        "rate": rate,
        "seconds": seconds,
        "bytes_per_event": per_event,
        "events": len(us),
        "unanswered": unanswered,
        "syncs": syncs,
        "events_per_sync": round(len(us) / max(1, syncs), 2),
        "latency_us": {
            "min": round(us[0]) if us else None,
            "p50": round(percentile(us, 0.50)) if us else None,
            "p90": round(percentile(us, 0.90)) if us else None,
            "p99": round(percentile(us, 0.99)) if us else None,
            "p99_9": round(percentile(us, 0.999)) if us else None,
            "max": round(us[-1]) if us else None,
        },
    }
    print(json.dumps(report))
    if unanswered:
        print(f"disk_floor.py: the disk did not keep up: {unanswered} events unanswered when the "
              f"run stopped", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
