"""What a starter on this machine needs besides the ranks themselves: free ports, and the one-line
root cause among the ranks that failed (the launcher re-exports both; it sits above the starters)."""
from __future__ import annotations

import json
import signal
import socket
from pathlib import Path

from workbench.runs import store as runstore


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


_AGENT_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT}
_COMM_ERRORS = ("Connection closed by peer", "Connection reset", "Broken pipe", "Timed out", "timed out",
                "DistNetworkError", "ECONNRESET", "DistBackendError", "Socket Timeout", "gloo")


def describe_failure(run_dir: Path, failures: dict) -> dict:
    """Pick the root cause among the failed ranks and describe it in one line.

    A rank killed by a signal, or one that raised something other than a communication error, is
    the cause; the ranks that merely lost their peer are consequences."""
    rows = []
    for rank, f in failures.items():
        err = runstore.read_json(Path(run_dir) / "ranks" / f"rank{rank}_error.json") or {}
        m = f.message
        while isinstance(m, dict):  # error files nest {"message": {"message": ..., "extraInfo": ...}}
            m = m.get("message", json.dumps(m))
        msg = err.get("error") or (m if isinstance(m, str) else str(m))
        killed = f.exitcode is not None and f.exitcode < 0
        stopped = killed and -f.exitcode in _AGENT_SIGNALS  # the agent stopping the survivors
        comm = any(s in (msg or "") for s in _COMM_ERRORS)
        rank_order = 3 if stopped else 0 if killed else 2 if comm else 1
        rows.append((rank_order, f.timestamp or 0, rank, f, msg, killed))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    _, _, rank, f, msg, killed = rows[0]
    if killed:
        cause = f"killed by {_signal_name(f.exitcode)}"
    else:
        cause = f"exited with code {f.exitcode}: {(msg or '').strip().splitlines()[-1] if msg else 'no error recorded'}"
    log = Path(run_dir) / "logs"
    return {"failed_rank": rank, "exitcode": f.exitcode, "error": f"rank {rank} {cause}",
            "failed_ranks": sorted(failures), "logs": str(log)}
