"""Instruments: ranges (NVTX + record_function), the sync counter, device timers, the NVML sampler."""
from workbench.instrument.ranges import Ranges, span, instrument_layers
from workbench.instrument.syncs import SyncCounter, expected_sync
from workbench.instrument.timers import StepTimer, peak_mem_mib, reset_peak_mem
from workbench.instrument.nvml import NvmlSampler
from workbench.instrument import state

__all__ = ["Ranges", "span", "instrument_layers", "SyncCounter", "expected_sync", "StepTimer",
           "peak_mem_mib", "reset_peak_mem", "NvmlSampler", "state"]
