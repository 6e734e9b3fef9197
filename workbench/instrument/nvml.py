"""Background NVML sampler: power (W), SM clock (MHz), utilization (%), memory used (MiB).

A silent no-op where NVML (`import pynvml`, from nvidia-ml-py) or a driver is missing.
"""
from __future__ import annotations

import threading
import time


def cuda_uuid(device_index: int) -> str | None:
    """The NVML-style UUID ("GPU-...") of CUDA device `device_index` as this process sees it (after
    CUDA_VISIBLE_DEVICES), from torch; None where torch has no CUDA device or no UUID."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        u = str(torch.cuda.get_device_properties(device_index).uuid)
    except Exception:  # noqa: BLE001 - an older torch without .uuid, or no such device
        return None
    return u if u.startswith("GPU-") else f"GPU-{u}"


def handle_for(pynvml, device_index: int):
    """NVML's handle of the GPU that CUDA device `device_index` is. NVML counts every GPU of the host and ignores
    CUDA_VISIBLE_DEVICES, so its index i is not CUDA's device i in a process pinned to another GPU (a multi-GPU job
    pins each child: read by index, every process pinned to GPU 1 would record GPU 0's UUID, clocks and power). By the
    UUID where torch gives one, else by the index (a one-GPU host, or no torch)."""
    u = cuda_uuid(device_index)
    if u:
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(u)
        except Exception:  # noqa: BLE001 - a UUID form this NVML does not take: the index, as before
            pass
    return pynvml.nvmlDeviceGetHandleByIndex(device_index)


class NvmlSampler:
    """`with NvmlSampler(period_s=0.1) as s: ...`; then `s.samples` (list of dicts) and `s.summary()`."""

    def __init__(self, device_index: int = 0, period_s: float = 0.1):
        self.device_index = device_index
        self.period_s = period_s
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread = None
        self._nvml = None
        self._handle = None

    def _open(self) -> bool:
        try:
            import pynvml
            pynvml.nvmlInit()
            self._handle = handle_for(pynvml, self.device_index)
            self._nvml = pynvml
            return True
        except Exception:  # no library, no driver, no device: sample nothing
            self._nvml = None
            return False

    def sample_once(self) -> dict | None:
        if self._nvml is None:
            return None
        n, h = self._nvml, self._handle
        try:
            row = {
                "t_s": time.time(),
                "power_w": n.nvmlDeviceGetPowerUsage(h) / 1e3,
                "sm_clock_mhz": n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
                "util_pct": n.nvmlDeviceGetUtilizationRates(h).gpu,
                "mem_used_mib": n.nvmlDeviceGetMemoryInfo(h).used / 2**20,
            }
        except Exception:
            return None
        self.samples.append(row)
        return row

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample_once()
            self._stop.wait(self.period_s)

    def __enter__(self):
        if self._open():
            self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        return False

    def device_info(self) -> dict:
        """Name, driver and UUID of the device (`uuid` left out where NVML cannot read it), or {} without NVML."""
        if self._nvml is None and not self._open():
            return {}
        n = self._nvml
        text = lambda v: v if isinstance(v, str) else v.decode()  # noqa: E731 - older NVML bindings return bytes
        try:
            out = {"gpu_name": text(n.nvmlDeviceGetName(self._handle)),
                   "driver": text(n.nvmlSystemGetDriverVersion())}
        except Exception:
            return {}
        try:  # which card ran it: processes of one --processes run on different cards are not one environment
            out["uuid"] = text(n.nvmlDeviceGetUUID(self._handle))
        except Exception:
            pass
        return out

    def summary(self) -> dict:
        """Median of each quantity over the samples ({} when none)."""
        if not self.samples:
            return {}
        out = {}
        for k in ("power_w", "sm_clock_mhz", "util_pct", "mem_used_mib"):
            vals = sorted(s[k] for s in self.samples)
            out[f"{k}_median"] = vals[len(vals) // 2]
        out["n_samples"] = len(self.samples)
        return out
