"""What a task asks for: cpu, memory, disk and accelerators, validated at construction.

Pure data, no I/O. Sizes follow Kubernetes: "16G"/"16GB" are 16 * 10**9 bytes, "16Gi"/"16GiB"
are 16 * 2**30; a bare int is bytes. A malformed value raises InvalidRequestError naming
the field, so `iris.submit` can refuse it before anything is stored.

TPU slice shapes: `v5litepod-16` is 16 chips on 4 hosts. The catalog below knows the
families Iris schedules; an unknown type is refused rather than guessed at.

Fallbacks: `tpu="v6e-4,v5litepod-4"` (or a list) names alternatives, preferred first. `tpu`
then holds the preferred one, `tpu_alternatives` all of them; every alternative must span
the same number of hosts, so the job has one task count whichever it lands on.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from iris.base.errors import InvalidRequestError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(i?)(B?)\s*$", re.IGNORECASE)
_POWERS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}


# The largest memory or disk a request may name: beyond any single machine sold today, so a
# larger one is a typo ("1000Ti"), refused at once instead of pending forever.
MAX_SIZE = 64 << 40


_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(n: int | float) -> str:
    """1 << 31 -> "2 GiB", 1536 << 20 -> "1.5 GiB", 1000 << 30 -> "1000 GiB": sizes as a
    person reads them in reasons, errors and tables (limits are mostly set in binary units,
    and read back the way they were written)."""
    value, unit = float(n), 0
    while value >= 1024 and unit < len(_BINARY_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    text = f"{value:.1f}".removesuffix(".0")
    return f"{text} {_BINARY_UNITS[unit]}"


def parse_size(value: int | float | str | None, field_name: str) -> int:
    """Bytes from 123, "512Mi", "16GB"... ; None means 0."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise InvalidRequestError(f"{field_name}: expected a size, got {value!r}", field_name)
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise InvalidRequestError(f"{field_name}: size must be a finite number >= 0, got "
                                      f"{value}", field_name)
        if value > MAX_SIZE:
            raise InvalidRequestError(f"{field_name}={value} bytes: more than any machine has "
                                      "(at most 64 TiB)", field_name)
        return int(value)
    if isinstance(value, str):
        m = _SIZE.match(value)
        if m:
            number, unit, binary, _ = m.groups()
            base = 1024 if binary else 1000
            size = float(number) * base ** _POWERS[unit.upper()]
            if size > MAX_SIZE:
                raise InvalidRequestError(f"{field_name}={value}: more than any machine has "
                                          "(at most 64 TiB)", field_name)
            return int(size)
    raise InvalidRequestError(
        f"{field_name}: cannot read size {value!r} (examples: 512Mi, 16GB, 2Ti, 1048576)",
        field_name,
    )


@dataclass(frozen=True)
class TpuShape:
    """A TPU slice type: `hosts` machines with `chips_per_host` chips each."""

    name: str
    family: str
    chips: int
    hosts: int

    @property
    def chips_per_host(self) -> int:
        return self.chips // self.hosts


# family -> (how the number in the name maps to chips, chips per host in multi-host slices,
#            largest single-host chip count). v4/v5p name TensorCores (2 per chip);
#            v5e/v6e name chips.
_TPU_FAMILIES = {
    "v4": (2, 4, 4),
    "v5p": (2, 4, 4),
    "v5litepod": (1, 4, 8),
    "v6e": (1, 4, 8),
}
_TPU_NAME = re.compile(r"^(v4|v5p|v5litepod|v6e)-(\d+)$")
KNOWN_GPUS = ("H100", "H200", "A100", "L4", "B200")

# Bounds on one gang, so a typo is refused at submit instead of pending forever. The
# largest multi-slice runs published use ~200 slices (50,944 v5e chips as 199 slices of
# 256); 256 leaves room. 16 GPUs is the most any machine type sold today has
# (a2-megagpu-16g); 1,024 hosts of 8 GPUs is beyond the largest single GPU jobs reported.
MAX_SLICES = 256
MAX_GPUS_PER_HOST = 16
MAX_GPU_HOSTS = 1024


@functools.lru_cache(maxsize=256)  # a scheduling pass asks for the same few names 100,000s of times
def tpu_shape(name: str) -> TpuShape:
    m = _TPU_NAME.match(name or "")
    if not m:
        raise InvalidRequestError(
            f"tpu: unknown accelerator type {name!r} (known families: "
            f"{', '.join(f'{f}-N' for f in _TPU_FAMILIES)})",
            "tpu",
        )
    family, number = m.group(1), int(m.group(2))
    per_name, per_host, single_host_max = _TPU_FAMILIES[family]
    if number <= 0 or number % per_name:
        raise InvalidRequestError(f"tpu: {name!r} is not a valid slice size", "tpu")
    chips = number // per_name
    if chips <= single_host_max:
        hosts = 1
    elif chips % per_host:
        raise InvalidRequestError(f"tpu: {name!r} does not divide into hosts", "tpu")
    else:
        hosts = chips // per_host
    return TpuShape(name=name, family=family, chips=chips, hosts=hosts)


@dataclass(frozen=True)
class Resources:
    """Per-task resources. `count` is GPUs per task, or TPU slices for a TPU job (default 1).

    A TPU job asks for whole slices: each slice host runs one task, so a `v5litepod-16`
    job is a gang of 4 tasks, and `count=2` makes it a multi-slice gang of 8 (2 whole
    slices, one region). A GPU job's gang is `hosts` tasks, one per host, placed whole on
    hosts of one pool: `Resources(gpu="H100", count=8, hosts=4)` is 32 GPUs on 4 hosts.
    """

    cpu: float = 1.0
    memory: int | str = 0
    disk: int | str = 0
    tpu: str | Sequence[str] | None = None
    gpu: str | None = None
    count: int = 1
    hosts: int = 1
    # Named ports the task listens on (`ports=["http", "tb"]`): its worker gives each a free
    # port, the task reads IRIS_PORT_HTTP, `iris job url JOB http` prints the address.
    ports: Sequence[str] = ()
    _memory_bytes: int = field(init=False, repr=False, compare=False)
    _disk_bytes: int = field(init=False, repr=False, compare=False)
    tpu_alternatives: tuple[str, ...] = field(init=False, repr=False, default=())

    def __post_init__(self) -> None:
        if isinstance(self.cpu, bool) or not isinstance(self.cpu, int | float) \
                or not math.isfinite(self.cpu) or self.cpu < 0:
            raise InvalidRequestError(f"cpu: expected a finite number >= 0, got {self.cpu!r}",
                                      "cpu")
        object.__setattr__(self, "_memory_bytes", parse_size(self.memory, "memory"))
        object.__setattr__(self, "_disk_bytes", parse_size(self.disk, "disk"))
        if self.tpu and self.gpu:
            raise InvalidRequestError("tpu and gpu: ask for one kind of accelerator", "tpu")
        if self.tpu is not None:
            alternatives = _tpu_alternatives(self.tpu)
            object.__setattr__(self, "tpu", alternatives[0])
            object.__setattr__(self, "tpu_alternatives", alternatives)
        if self.gpu is not None and self.gpu not in KNOWN_GPUS:
            raise InvalidRequestError(
                f"gpu: unknown accelerator {self.gpu!r} (known: {', '.join(KNOWN_GPUS)})", "gpu"
            )
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise InvalidRequestError(f"count: expected an int >= 1, got {self.count!r}", "count")
        self._check_gang()
        object.__setattr__(self, "ports", check_ports(self.ports))

    def _check_gang(self) -> None:
        if self.tpu is not None and self.count > MAX_SLICES:
            raise InvalidRequestError(f"count: at most {MAX_SLICES} {self.tpu} slices in one "
                                      f"gang, got {self.count}", "count")
        if self.gpu is not None and self.count > MAX_GPUS_PER_HOST:
            raise InvalidRequestError(f"count: at most {MAX_GPUS_PER_HOST} GPUs per task (one "
                                      f"host), got {self.count}", "count")
        if isinstance(self.hosts, bool) or not isinstance(self.hosts, int) or self.hosts < 1:
            raise InvalidRequestError(f"hosts: expected an int >= 1, got {self.hosts!r}", "hosts")
        if self.hosts > 1 and self.gpu is None:
            raise InvalidRequestError(
                f"hosts={self.hosts}: only a GPU job names its hosts (a TPU type fixes its "
                "own; ask for more slices with count=N)", "hosts")
        if self.hosts > MAX_GPU_HOSTS:
            raise InvalidRequestError(f"hosts: at most {MAX_GPU_HOSTS} hosts in one GPU gang, "
                                      f"got {self.hosts}", "hosts")

    @property
    def memory_bytes(self) -> int:
        return self._memory_bytes

    @property
    def disk_bytes(self) -> int:
        return self._disk_bytes

    @property
    def accelerator(self) -> str | None:
        return self.tpu or self.gpu

    @property
    def tpu_slice(self) -> TpuShape | None:
        return tpu_shape(self.tpu) if self.tpu else None

    @property
    def has_fallbacks(self) -> bool:
        return len(self.tpu_alternatives) > 1

    def choose(self, tpu: str) -> Resources:
        """These resources with `tpu` (one of the alternatives) as the only TPU type."""
        if tpu not in self.tpu_alternatives:
            raise InvalidRequestError(f"tpu: {tpu!r} is not one of {self.tpu_alternatives}",
                                      "tpu")
        return replace(self, tpu=tpu)

    def alternative_on(self, accelerator: str | None) -> Resources:
        """What an attempt placed on a host of `accelerator` uses: the alternative of that
        exact type, else of its family (single-host tasks pack onto larger slices), else
        the preferred one."""
        if not self.has_fallbacks or not accelerator:
            return self
        family = accelerator.rsplit("-", 1)[0]
        for match in (lambda a: a == accelerator, lambda a: a.rsplit("-", 1)[0] == family):
            for alt in self.tpu_alternatives:
                if match(alt):
                    return self.choose(alt)
        return self

    @property
    def slices(self) -> int:
        """How many whole TPU slices a gang of these resources holds (0: not a TPU job)."""
        return self.count if self.tpu else 0

    @property
    def gang_size(self) -> int:
        """How many tasks must start together: all hosts of all slices, the GPU gang's
        hosts, else 1."""
        shape = self.tpu_slice
        if shape:
            return shape.hosts * self.count
        return self.hosts if self.gpu else 1

    def to_dict(self) -> dict:
        # `hosts` only when it says something, so single-host specs read (and store) as
        # they did before GPU gangs existed.
        return {
            "cpu": self.cpu,
            "memory": self.memory_bytes,
            "disk": self.disk_bytes,
            "tpu": ",".join(self.tpu_alternatives) if self.tpu else None,
            "gpu": self.gpu,
            "count": self.count,
        } | ({"hosts": self.hosts} if self.hosts != 1 else {}) | (
            {"ports": list(self.ports)} if self.ports else {})

    @classmethod
    def from_dict(cls, data: dict) -> Resources:
        return cls(**{k: data[k] for k in ("cpu", "memory", "disk", "tpu", "gpu", "count",
                                              "hosts", "ports")
                      if k in data})


# A port name becomes part of an environment variable (IRIS_PORT_HTTP) and of a proxy
# path; 16 covers a server, TensorBoard, a debugger and more on one task.
_PORT_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
MAX_PORTS = 16


def check_ports(value: object) -> tuple[str, ...]:
    """["http", "tb"] -> ("http", "tb"): lower-case names, each once, at most MAX_PORTS."""
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidRequestError(f"ports: expected a list of port names like ['http'], got "
                                  f"{value!r}", "ports")
    names = tuple(value)
    for name in names:
        if not isinstance(name, str) or not _PORT_NAME.fullmatch(name):
            raise InvalidRequestError(f"ports: {name!r} is not a port name (lower-case "
                                      "letters, digits and _, starting with a letter, at most "
                                      "32), e.g. 'http'", "ports")
    if len(set(names)) != len(names):
        raise InvalidRequestError(f"ports: a name is given twice in {list(names)}", "ports")
    if len(names) > MAX_PORTS:
        raise InvalidRequestError(f"ports: at most {MAX_PORTS} named ports, got {len(names)}",
                                  "ports")
    return names


def _tpu_alternatives(value: object) -> tuple[str, ...]:
    """"v6e-4,v5litepod-4" or ["v6e-4", "v5litepod-4"] -> both names, each checked, all of
    one host count (a job's task count may not depend on where it lands)."""
    if isinstance(value, str):
        names = [n.strip() for n in value.split(",")]
    elif isinstance(value, Sequence) and all(isinstance(n, str) for n in value):
        names = [n.strip() for n in value]
    else:
        raise InvalidRequestError(f"tpu: expected a TPU type, a comma-separated list or a "
                                  f"list of them, got {value!r}", "tpu")
    if not names or not all(names):
        raise InvalidRequestError(f"tpu: empty accelerator type in {value!r}", "tpu")
    if len(set(names)) != len(names):
        raise InvalidRequestError(f"tpu: an alternative is named twice in {value!r}", "tpu")
    shapes = [tpu_shape(n) for n in names]
    if len({s.hosts for s in shapes}) > 1:
        said = ", ".join(f"{s.name} is {s.hosts} host(s)" for s in shapes)
        raise InvalidRequestError(f"tpu: fallback alternatives must span the same number of "
                                  f"hosts ({said})", "tpu")
    return tuple(names)
