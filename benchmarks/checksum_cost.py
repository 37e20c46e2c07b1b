"""The CPU a part's checksums cost the writing thread: each algorithm of magicfs's
``checksum`` option, and the SHA-256 botocore's signer computes over a part's body on
plain HTTP (docs/s3-compatible-stores.md, "Checksums, end to end"; docs/stores/s3.md,
"Parts, over plain HTTP").

    python benchmarks/checksum_cost.py             # 8 MiB parts, median of 5
    python benchmarks/checksum_cost.py --part-mib 16 --runs 9

Each algorithm hashes the same random part ``--runs`` times in this process, through
botocore's own checksum classes (the ones the writer uses: ``botocore.httpchecksum``),
and the signer's hash through ``hashlib.sha256`` (what botocore's SigV4 payload hash
calls). Prints, per algorithm, the median milliseconds of CPU per part, the same scaled to a
128 MiB file, and the rate in GiB/s. CRC32C and CRC64NVME need botocore's CRT extension
(``botocore[crt]``): without it their rows say so. Single-threaded CPU: the figures
move with the machine's load, not with any server.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import time
from collections.abc import Callable

from botocore import httpchecksum
from botocore.compat import HAS_CRT

MIB = 1024 * 1024

#: The ``checksum`` option's algorithms, by the class botocore computes each with.
ALGORITHMS: dict[str, type[httpchecksum.BaseChecksum]] = {
    "CRC32": httpchecksum.Crc32Checksum,
    "CRC32C": httpchecksum.CrtCrc32cChecksum,
    "CRC64NVME": httpchecksum.CrtCrc64NvmeChecksum,
    "SHA1": httpchecksum.Sha1Checksum,
    "SHA256": httpchecksum.Sha256Checksum,
}
NEEDS_CRT = frozenset({"CRC32C", "CRC64NVME"})


def hasher(name: str) -> Callable[[bytes], object] | None:
    """One part's digest by ``name``, or ``None`` where botocore cannot compute it here."""
    if name == "signer's SHA-256":
        return lambda part: hashlib.sha256(part).digest()
    if name in NEEDS_CRT and not HAS_CRT:
        return None
    checksum_class = ALGORITHMS[name]

    def digest(part: bytes) -> object:
        checksum = checksum_class()
        checksum.update(part)
        return checksum.digest()

    return digest


def median_seconds(digest: Callable[[bytes], object], part: bytes, runs: int) -> float:
    """Median CPU time of this thread for one digest of ``part``, after one warm-up (CPU,
    not wall time: on a loaded machine the wall clock counts other processes' turns)."""
    digest(part)
    times = []
    for _ in range(runs):
        start = time.thread_time()
        digest(part)
        times.append(time.thread_time() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--part-mib", type=int, default=8, help="part size in MiB")
    parser.add_argument("--runs", type=int, default=5, help="digests per algorithm")
    args = parser.parse_args()
    part = os.urandom(args.part_mib * MIB)
    print(f"One {args.part_mib} MiB part, median of {args.runs}, CPU of one thread:\n")
    print(f"| algorithm | CPU ms per {args.part_mib} MiB part | CPU ms per 128 MiB | GiB/s |")
    print("|---|---:|---:|---:|")
    for name in [*ALGORITHMS, "signer's SHA-256"]:
        digest = hasher(name)
        if digest is None:
            print(f"| {name} | needs `botocore[crt]` | | |")
            continue
        seconds = median_seconds(digest, part, args.runs)
        per_128 = seconds * 128 / args.part_mib
        rate = args.part_mib / 1024 / seconds
        print(f"| {name} | {seconds * 1000:.1f} | {per_128 * 1000:.0f} | {rate:.2f} |")


if __name__ == "__main__":
    main()
