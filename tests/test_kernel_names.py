"""One kernel name and one class, whatever the tracer: the normaliser (`workbench.traces.names`)
and the classifier (`workbench.traces.classify`) on real kernel names taken from both tools' committed traces
(tests/data/kernel_classes.csv: torch.profiler names from profiles/, Nsight `demangledName`s from the H100 fixture),
with negative controls."""
import csv
import os
import sqlite3

import pytest

from workbench.traces.classify import kernel_class
from workbench.traces.names import base_name, demangle, kernel_name, template_args

HERE = os.path.dirname(__file__)
FIXTURE = os.path.join(HERE, "fixtures", "nsys_h100_packing_rebuild.sqlite")
with open(os.path.join(HERE, "data", "kernel_classes.csv"), newline="") as f:
    TABLE = list(csv.DictReader(f))


@pytest.mark.parametrize("row", TABLE, ids=[f"{r['tool']}-{r['expected']}-{i}" for i, r in enumerate(TABLE)])
def test_real_kernel_names_get_their_class(row):
    assert kernel_class(row["name"], part=row["part"] or None, pass_=row["pass_"] or None) == row["expected"]


def test_table_covers_both_tools_and_every_busy_class():
    from workbench.traces.decompose import BUSY
    assert {r["tool"] for r in TABLE} == {"torch", "nsys"}
    assert {r["expected"] for r in TABLE} == set(BUSY)


def _fixture_kernels():
    con = sqlite3.connect(f"file:{FIXTURE}?mode=ro", uri=True)
    try:
        s = dict(con.execute("SELECT id, value FROM StringIds"))
        rows = set(con.execute("SELECT mangledName, demangledName, shortName FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    finally:
        con.close()
    return [(s[m], s[d], s[sh]) for m, d, sh in rows]


def test_both_tools_spellings_give_one_name_and_one_class():
    """Every kernel of the real H100 capture: the name kineto would store (libstdc++'s demangling of the mangled
    name) and Nsight's own demangling normalise to the same string, hence the same class; and the base name of
    that string is Nsight's shortName."""
    kernels = _fixture_kernels()
    assert len(kernels) > 50
    for mangled, nsys_demangled, short in kernels:
        kineto = demangle(mangled)
        assert kernel_name(kineto) == kernel_name(nsys_demangled), short
        assert kernel_class(kineto) == kernel_class(nsys_demangled), short
        assert base_name(kineto) == short


def test_short_names_lose_the_class_negative_control():
    """What the nsys loader used to store: the short name. For the copy kernels it cannot give the class the full
    name gives (the issue's copy gap); the check above would fail on it."""
    lost = [(short, kernel_class(d)) for _, d, short in _fixture_kernels() if kernel_class(short) != kernel_class(d)]
    assert {"vectorized_elementwise_kernel", "unrolled_elementwise_kernel", "elementwise_kernel", "Kernel2"} <= {
        s for s, _ in lost}
    assert {c for _, c in lost} == {"copy", "gemm"}


def test_normaliser_forms():
    full = ("void at::native::vectorized_elementwise_kernel<8, at::native::FillFunctor<c10::BFloat16>, "
            "std::array<char*, 1ul> >(int, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul>)")
    n = kernel_name(full)
    assert n == "at::native::vectorized_elementwise_kernel<8, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul>>"
    assert kernel_name(n) == n  # idempotent: saved events may hold either form
    assert base_name(full) == "vectorized_elementwise_kernel"
    assert template_args(full).startswith("8, at::native::FillFunctor")
    assert kernel_name("Memset (Device)") == kernel_name("Memset") == "Memset"
    assert kernel_name("nvjet_sm90_tst_64x8_64x16_2x4_h_bz_NNT") == "nvjet_sm90_tst_64x8_64x16_2x4_h_bz_NNT"
    assert kernel_name("_ZN7cutlass7Kernel2I42cutlass_80_simt_sgemm_128x32_8x5_nn_align1EEvNT_6ParamsE") == (
        "cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>")
    assert kernel_name(None) == ""


def test_a_mangled_name_the_demangler_rejects_is_read_off_its_source_names():
    """kineto (and libstdc++) leave CUTLASS 3's grouped-GEMM launcher mangled; its base name and arguments still
    come out of the length-prefixed names, so it is a GEMM by its launcher's argument, not by luck."""
    mangled = next(r["name"] for r in TABLE if r["name"].startswith("_Z"))
    assert kernel_name(mangled) == mangled
    assert base_name(mangled) == "device_kernel"
    assert "GemmUniversal" in template_args(mangled)


@pytest.mark.parametrize("name", [
    # an elementwise kernel whose functor's template arguments mention a GEMM (constructed from the real form):
    # the arguments of a TensorIterator kernel decide only copy vs elementwise
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
    "at::native::(anonymous namespace)::gemm_bias_epilogue<cutlass::gemm::GemmShape<128, 128, 32> > >, "
    "std::array<char*, 3ul> >(int, at::native::BinaryFunctor<float, float, float, at::native::(anonymous namespace)"
    "::gemm_bias_epilogue<cutlass::gemm::GemmShape<128, 128, 32> > >, std::array<char*, 3ul>)",
    # copysign is arithmetic, not a copy
    "void at::native::vectorized_elementwise_kernel<4, at::native::copysign_kernel_cuda(at::TensorIteratorBase&)"
    "::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(float, float)#1}, "
    "std::array<char*, 3ul> >(int, at::native::copysign_kernel_cuda(at::TensorIteratorBase&)::{lambda()#1}"
    "::operator()() const::{lambda()#2}::operator()() const::{lambda(float, float)#1}, std::array<char*, 3ul>)",
])
def test_template_arguments_of_an_elementwise_kernel_do_not_make_it_a_gemm_or_a_copy(name):
    assert kernel_class(name) == "norm_elementwise"


def test_flash_kernels_with_cutlass_types_are_attention_not_gemm():
    flash = next(r["name"] for r in TABLE if "flash_fwd_kernel" in r["name"])
    assert "cutlass" in flash
    assert kernel_class(flash) == "attention"
