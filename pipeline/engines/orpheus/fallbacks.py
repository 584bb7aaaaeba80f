"""The faster paths that may not run on a given device, and what runs instead.

A set of CUDA graphs that fails to capture, or a Triton kernel that fails its first call, costs
speed, never a job: the engine runs the path it replaces (eager steps, torch ops) and says why.
Every reason goes to one list, the engine's, recorded on every job (``fallbacks`` in its
metrics' extra): the device's dtype and the quantization as loaded, the codec's and the sampler's
kernels, the decode, prefill, mixed and codec graphs. ``capture_graphs`` is the one way a set of CUDA
graphs is captured.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


def fall_back(fallbacks: list[str], what: str, error: Exception, instead: str) -> str:
    """Say that ``what`` failed with ``error`` and ``instead`` runs: logged, and kept in
    ``fallbacks``. Returns the reason."""
    reason = f"{what} failed ({type(error).__name__}: {error}); {instead}"
    log.warning(reason)
    fallbacks.append(reason)
    return reason


@dataclass
class Graph:
    """A captured CUDA graph with its static input and output: a replay reads what was copied into
    ``inputs`` and writes ``output``."""

    graph: torch.cuda.CUDAGraph
    inputs: Any  # a tensor, or a tuple of them (the codec's)
    output: Any

    def replay(self):
        self.graph.replay()
        return self.output


def capture_graphs(
    shapes: Iterable[Hashable],
    inputs_for: Callable,
    step: Callable,
    *,
    device,
    what: str,
    instead: str,
    fallbacks: list[str],
    warm_up: Callable[[], None] | None = None,
) -> dict:
    """A CUDA graph of ``step(shape, inputs)`` for each shape, in order, all in one memory pool
    (largest first: the pool then holds about the largest one's activations); ``inputs_for(shape)``
    makes the static input a replay reads. Before its capture each step runs once on a side stream
    (it compiles kernels and allocates workspaces outside the graph), or, given ``warm_up``, that
    runs once before them all. Any failure drops them all and records why (``fall_back``): the
    caller then runs ``step`` eagerly. Returns shape -> ``Graph``."""
    import torch

    graphs: dict = {}
    pool = torch.cuda.graph_pool_handle()
    try:
        with torch.inference_mode():
            side = torch.cuda.Stream(device)
            if warm_up is not None:
                _on_side_stream(side, warm_up)
            for shape in shapes:
                inputs = inputs_for(shape)
                if warm_up is None:
                    _on_side_stream(side, lambda: step(shape, inputs))
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    output = step(shape, inputs)
                graphs[shape] = Graph(graph, inputs, output)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - any capture failure means "run eagerly, say why"
        graphs.clear()
        fall_back(fallbacks, what, e, instead)
    return graphs


def _on_side_stream(side, run: Callable[[], object]) -> None:
    """``run`` on the stream ``side``, ordered after and before the current stream's work."""
    import torch

    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream().wait_stream(side)
