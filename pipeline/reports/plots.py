"""The HTML report's plots, as base64 PNGs (matplotlib, Agg: no display needed).
matplotlib comes with the ``reports`` extra; without it the HTML report has no plots and says so."""

from __future__ import annotations

import base64
import io

from pipeline.reports.model import Report


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(width: float = 7, height: float = 3):
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure  # a bare Figure: no pyplot global state

    fig = Figure(figsize=(width, height))
    return fig, fig.subplots()


def throughput_over_time(r: Report) -> str:
    fig, ax = _figure()
    s = r.series
    xrt = [a / s.bin_s for a in s.audio_s]  # fleet audio per wall second of the bin
    ax.bar(s.starts, xrt, width=s.bin_s / 86400 * 0.9, align="edge", color="#3b7dd8")
    ax.set_ylabel("audio s per wall s (fleet)")
    ax.set_title("Throughput over time")
    fig.autofmt_xdate()
    return _png(fig)


def ttfb_distribution(r: Report) -> str:
    fig, ax = _figure()
    values = r.series.ttfb_s
    if values:
        ax.hist(values, bins=min(50, max(5, len(values) // 5)), color="#d8843b")
        for q, style in (("p50", "-"), ("p95", "--"), ("p99", ":")):
            v = getattr(r.ttfb["all"], q)
            ax.axvline(v, color="black", linestyle=style, label=f"{q} {v:.2f} s")
        ax.legend()
    ax.set_xlabel("TTFB (s)")
    ax.set_ylabel("jobs")
    ax.set_title("TTFB distribution")
    return _png(fig)


def per_gpu_bars(r: Report) -> str:
    rows = r.throughput["worker_host"]
    fig, ax = _figure(7, max(2.0, 0.5 * len(rows) + 1))
    labels = [f"{row.key}\n{', '.join(row.device_types)}" for row in rows]
    ax.barh(labels, [row.x_realtime or 0 for row in rows], color="#4caf50")
    ax.invert_yaxis()
    ax.set_xlabel("x real time (audio s / busy s)")
    ax.set_title("Throughput per worker (GPU)")
    return _png(fig)


def all_plots(r: Report) -> dict[str, str]:
    return {
        "Throughput over time": throughput_over_time(r),
        "TTFB distribution": ttfb_distribution(r),
        "Per-GPU throughput": per_gpu_bars(r),
    }
