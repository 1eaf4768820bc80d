"""What every benchmark reports about the machine it ran on (these machines are shared and noisy:
the numbers are read next to the load average at the start)."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any


def processor_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (empty where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def total_memory() -> str:
    """``MemTotal`` from ``/proc/meminfo`` as written there (e.g. ``24684096 kB``)."""
    try:
        return Path("/proc/meminfo").read_text().splitlines()[0].split(":", 1)[1].strip()
    except (OSError, IndexError):
        return ""


def machine_basics() -> dict[str, Any]:
    """Platform, processor, cores, memory, Python version and the load average now."""
    return {
        "platform": platform.platform(),
        "processor": processor_model(),
        "cores": os.cpu_count(),
        "memory": total_memory(),
        "python": platform.python_version(),
        "load_average_at_start": list(os.getloadavg()),
    }
