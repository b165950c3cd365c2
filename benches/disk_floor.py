#!/usr/bin/env python3
"""The disk's floor under (d) of benches/e2e.sh: the acknowledgment latency of an ideal group
committer, which spends no CPU on anything but the disk.

Events arrive open loop at RATE per second (evenly spaced, like loadgen's intended send times).
One loop, as fast as it can: take every event that has arrived, append BYTES_PER_EVENT bytes
each to a file, fdatasync it (R14: durable before the answer), and "acknowledge" them all. An
event's latency runs from its arrival to the end of the fdatasync that covered it, so a slow
sync delays every event that arrives during it, as it does in hookwall's group commit.

Any server that acknowledges only after fdatasync meets at least these latencies on this disk
at this rate: (d)'s p99 against this p99 says how much of it is the disk and how much is
hookwall. The file is written once before the run and then overwritten in a ring, like a WAL
file RocksDB reuses (`recycle_log_file_num`), so a sync writes data and no file metadata.

Usage: disk_floor.py DIR RATE SECONDS BYTES_PER_EVENT   (prints one JSON object; latencies in
microseconds: p50, p90, p99, p99_9, max; syncs, events, mean events per sync). Bounded by
SECONDS; the file (64 MiB) is removed at the end.
"""
import json
import os
import sys
import time

RING_BYTES = 64 << 20


def percentile(sorted_us, q):
    return sorted_us[min(len(sorted_us) - 1, int(q * len(sorted_us)))]


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: disk_floor.py DIR RATE SECONDS BYTES_PER_EVENT")
    directory = sys.argv[1]
    rate, seconds, per_event = float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    if not (rate > 0 and seconds > 0 and 0 < per_event <= 1 << 20):
        sys.exit("disk_floor.py: RATE and SECONDS must be > 0, BYTES_PER_EVENT in 1..=1048576")
    path = os.path.join(directory, "disk-floor.wal")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        chunk = b"\0" * (1 << 20)
        for _ in range(RING_BYTES >> 20):
            os.write(fd, chunk)
        os.fsync(fd)
        record = b"w" * (per_event * 4096)  # sliced per sync; up to 4096 events per sync
        latencies = []
        syncs = 0
        offset = 0
        acked = 0  # events 0..acked have been acknowledged
        start = time.monotonic()
        end_arrivals = int(seconds * rate)
        while acked < end_arrivals:
            now = time.monotonic()
            arrived = min(end_arrivals, int((now - start) * rate) + 1)
            if arrived <= acked:
                # Nothing waiting: sleep until the next arrival.
                time.sleep(max(0.0, start + acked / rate - now))
                continue
            n = min(arrived - acked, 4096)
            size = n * per_event
            if offset + size > RING_BYTES:
                offset = 0
            os.pwrite(fd, record[:size], offset)
            offset += size
            os.fdatasync(fd)
            done = time.monotonic()
            syncs += 1
            for k in range(acked, acked + n):
                latencies.append(done - (start + k / rate))
            acked += n
        us = sorted(max(0.0, x) * 1e6 for x in latencies)
        print(json.dumps({
            "rate": rate,
            "seconds": seconds,
            "bytes_per_event": per_event,
            "events": len(us),
            "syncs": syncs,
            "events_per_sync": round(len(us) / max(1, syncs), 2),
            "latency_us": {
                "p50": round(percentile(us, 0.50)),
                "p90": round(percentile(us, 0.90)),
                "p99": round(percentile(us, 0.99)),
                "p99_9": round(percentile(us, 0.999)),
                "max": round(us[-1]),
            },
        }))
    finally:
        os.close(fd)
        os.unlink(path)


if __name__ == "__main__":
    main()
