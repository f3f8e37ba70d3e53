"""Ray for this run: a local cluster started for it, or an existing one (--ray-address),
joined quietly (Ray's log lines never reach stdout: log_to_driver=False, and the messages
Ray's driver prints itself go to stderr), with a token check that says in one line what a
cluster that asks for one wants. Used by a sweep (parity.sweep.on_ray) and a data run on
Ray (parity.sources.data_ray).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from parity.errors import UsageError, first_line

EXTRA_HINT = "pip install 'onnx-parity[ray]' (in a checkout: pip install -e '.[ray]')"
TOKEN_HINT = (
    "set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH, or the token in "
    "~/.ray/auth_token), as on the cluster"
)
LOCAL_OBJECT_STORE = 256 << 20
GPU_PROVIDERS = (
    "CUDAExecutionProvider",
    "TensorrtExecutionProvider",
    "ROCMExecutionProvider",
    "MIGraphXExecutionProvider",
)
"""Execution providers that run on a GPU: Ray's "GPU" resource covers NVIDIA and AMD alike."""


def import_ray(flag: str = "--engine ray") -> Any:
    """The ray module; UsageError (one line naming the extra) without it."""
    try:
        import ray
    except ImportError:
        raise UsageError(f"{flag} needs Ray, which is not installed: {EXTRA_HINT}") from None
    return ray


def connect(ray: Any, address: str | None, workers: int | None) -> None:
    """Join the cluster at `address`, or start a local one of `workers` CPUs (default: this
    machine's); UsageError (one line) when the cluster cannot be joined."""
    quiet = {"log_to_driver": False, "logging_level": "WARNING"}
    if not address:
        ray.init(
            num_cpus=workers or os.cpu_count() or 1,
            include_dashboard=False,
            object_store_memory=LOCAL_OBJECT_STORE,
            **quiet,
        )
        return
    if address.startswith("ray://"):
        try:
            import grpc  # noqa: F401  (what Ray Client needs: ray[client])
        except ImportError:
            raise UsageError(
                f"--ray-address {address}: Ray Client (ray://) needs ray[client]: {EXTRA_HINT}"
            ) from None
    if not address.startswith("ray://") and address != "auto":
        check_token(address)
    try:
        ray.init(address=address, **quiet)
    except Exception as exc:  # ConnectionError, RuntimeError, grpc errors: one line each
        text = _last_line(exc) if "Traceback" in str(exc) else first_line(exc)
        if "auth" in text.lower() or "token" in text.lower():
            raise UsageError(
                f"--ray-address {address}: the cluster asks for a token: {TOKEN_HINT} ({text})"
            ) from None
        raise UsageError(f"--ray-address {address}: cannot connect: {text}") from None


TOKEN_PROBE_S = 5.0
"""How long the token check waits for the cluster's answer before leaving it to Ray."""
_GCS_PROBE = "/ray.rpc.NodeInfoGcsService/GetClusterId"


def check_token(address: str, timeout: float = TOKEN_PROBE_S) -> None:
    """One cheap call to the cluster's GCS with the token Ray would send (none, or
    RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH / ~/.ray/auth_token under RAY_AUTH_MODE=token): a
    cluster that refuses it is one UsageError line naming what to set, within seconds, instead
    of Ray's retries and logs. Anything else (no answer, another error) is left to ray.init."""
    try:
        import grpc
    except ImportError:
        return
    metadata = _token_metadata()
    channel = grpc.insecure_channel(address)
    try:
        call = channel.unary_unary(_GCS_PROBE)
        call(b"", timeout=timeout, metadata=metadata)
    except grpc.RpcError as exc:
        code = exc.code() if callable(getattr(exc, "code", None)) else None
        if code == grpc.StatusCode.UNAUTHENTICATED:
            said = "refused this driver's token" if metadata else "asks for a token"
            raise UsageError(f"--ray-address {address}: the cluster {said}: {TOKEN_HINT}") from None
    finally:
        channel.close()


def _token_metadata() -> tuple[tuple[str, str], ...]:
    """The authorization header Ray's own client would send (Ray's token loader), or none."""
    try:
        from ray._private.authentication.grpc_authentication_client_interceptor import (
            _get_authentication_metadata_tuple,
        )

        return tuple(_get_authentication_metadata_tuple())
    except Exception:  # another Ray layout, or no token configured: send none
        return ()


def _last_line(exc: BaseException) -> str:
    """The last line of a message that carries a server's traceback (Ray Client's)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1][:300] if lines else type(exc).__name__


@contextlib.contextmanager
def prints_to_stderr() -> Iterator[None]:
    """Ray's driver prints the errors its raylets publish ("(raylet) A worker died...") on
    stdout, whatever log_to_driver says: send them to stderr while the sweep runs."""
    try:
        import ray._private.worker as worker
    except ImportError:  # another Ray layout: nothing to redirect
        yield
        return
    original = getattr(worker, "print_to_stdstream", None)
    if original is None:
        yield
        return

    def to_stderr(data: dict, *args: Any, **kwargs: Any) -> None:
        original({**data, "is_err": True}, *args, **kwargs)

    worker.print_to_stdstream = to_stderr
    try:
        yield
    finally:
        worker.print_to_stdstream = original


def cluster_cpus(ray: Any) -> int:
    """The CPUs of the cluster this process joined (at least 1)."""
    return max(1, int(ray.cluster_resources().get("CPU", 1)))
