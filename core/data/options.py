"""What `--data` and its flags ask for (`RunConfig.data`), and the text forms of its values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from parity.data.result import TASKS
from parity.errors import UsageError

DEFAULT_BATCH_SIZE = 64
DEFAULT_MAX_BAD = 0.01  # skipped samples allowed, as a fraction of those read
ENGINES = ("local", "ray")


@dataclass(frozen=True)
class DataOptions:
    """A data set to judge answers on. `labels`: a .npy file (one label per sample, in the
    samples' order) or a table column; an ImageFolder's labels are its folders. `preprocess`:
    FILE.py:FN (code: trusted as --model FILE.py:make), a function from a sample's path to a
    dict of input arrays without the sample axis. `tasks`: output -> TASKS (else inferred);
    `min_agreement`: output -> the fraction of samples that must give the same answer."""

    path: str
    batch_size: int = DEFAULT_BATCH_SIZE
    limit: int | None = None
    preprocess: str | None = None
    labels: str | None = None
    max_bad: float = DEFAULT_MAX_BAD
    tasks: Mapping[str, str] = field(default_factory=dict)
    min_agreement: Mapping[str, float] = field(default_factory=dict)
    # where the batches run: "local" (this process) or "ray" (shards of the data set on a
    # Ray cluster: `ray_address`, else a local one of `workers` CPUs; at most `workers`
    # actors; parity.sources.data_ray)
    engine: str = "local"
    ray_address: str | None = None
    workers: int | None = None

    def problems(self) -> list[str]:
        """Why these options cannot run (flag-worded), [] when they can."""
        found = []
        if self.batch_size < 1:
            found.append(f"--batch-size must be >= 1, got {self.batch_size}")
        if self.limit is not None and self.limit < 1:
            found.append(f"--limit must be >= 1, got {self.limit}")
        if not 0 <= self.max_bad <= 1:
            found.append(f"--max-bad must be a fraction in [0, 1], got {self.max_bad}")
        if self.engine not in ENGINES:
            found.append(f"--engine {self.engine}: choose from {', '.join(ENGINES)}")
        elif self.engine == "local" and (self.ray_address or self.workers):
            found.append("--ray-address and --workers apply only with --engine ray")
        if self.workers is not None and self.workers < 1:
            found.append(f"--workers must be >= 1, got {self.workers}")
        for name, task in self.tasks.items():
            if task not in TASKS:
                found.append(f"--task {name}={task}: choose from {', '.join(TASKS)}")
        for name, value in self.min_agreement.items():
            if not 0 <= value <= 1:
                found.append(f"--min-agreement {name}={value}: a fraction in [0, 1]")
        return found


def parse_pairs(items: list[str] | None, flag: str) -> dict[str, str]:
    """NAME=VALUE items of a repeatable flag, as a dict (UsageError on a malformed one)."""
    found: dict[str, str] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise UsageError(f"{flag} expects NAME=VALUE, got {item!r}")
        found[name] = value
    return found


def parse_fraction(text: str, flag: str) -> float:
    """0.01, or 1%: a fraction (UsageError otherwise)."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise UsageError(
            f"{flag} expects a fraction such as 0.995 or 99.5%, got {text!r}"
        ) from None
    return value


def parse_min_agreement(items: list[str] | None) -> dict[str, float]:
    return {
        name: parse_fraction(value, "--min-agreement")
        for name, value in parse_pairs(items, "--min-agreement").items()
    }
